# make deb     dist/safefs_VERSION_ARCH.deb, with dist/safefs and dist/safefs.8
# make safefs  only the static, versioned dist/safefs and its man page
# Both need Go (go.mod's version) and the Go module proxy; packaging/build
# does the work (docs/operations.md, "Building the package").
.PHONY: deb safefs clean
deb:
	cd packaging && go run ./build
safefs:
	cd packaging && go run ./build -deb=false
clean:
	rm -rf dist
