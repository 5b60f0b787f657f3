# Convenience targets; each is one command that also works without make.
.PHONY: build test dist

build:
	go build ./cmd/baton

test:
	go test -race ./...

# Release archives for linux/darwin x amd64/arm64 with SHA256SUMS, in dist/.
dist:
	scripts/dist.sh $(if $(VERSION),-v $(VERSION))
