# Container image for test mounts: run with --device /dev/fuse --cap-add SYS_ADMIN.
# The base images are build arguments so that a machine that cannot pull
# them can pass local ones (cmd/safefs/container_test.go builds both from a
# debootstrap rootfs; GO_IMAGE needs the go.mod Go version on its PATH).
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -o /out/safefs ./cmd/safefs

FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends fuse3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/safefs /usr/local/bin/safefs
VOLUME ["/data"]
RUN mkdir -p /mnt/safe
ENTRYPOINT ["safefs"]
CMD ["mount", "-o", "allow_other", "/data", "/mnt/safe"]
