# Container image for test mounts: run with --device /dev/fuse --cap-add SYS_ADMIN.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -o /out/safefs ./cmd/safefs

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends fuse3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/safefs /usr/local/bin/safefs
VOLUME ["/data"]
RUN mkdir -p /mnt/safe
ENTRYPOINT ["safefs"]
CMD ["mount", "-o", "allow_other", "/data", "/mnt/safe"]
