# Container image for test mounts: run with --device /dev/fuse --cap-add SYS_ADMIN.
# The base images are build arguments so that a machine that cannot pull
# them can pass local ones (container/container_test.go builds both from a
# debootstrap rootfs; GO_IMAGE needs go.mod's Go version on its PATH). Full
# names: podman does not resolve the short name golang:... by default.
ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -ldflags "-X main.version=$(cat VERSION)" -o /out/safefs ./cmd/safefs

FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends fuse3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/safefs /usr/local/bin/safefs
VOLUME ["/data"]
RUN mkdir -p /mnt/safe
ENTRYPOINT ["safefs"]
CMD ["mount", "-o", "allow_other", "/data", "/mnt/safe"]
