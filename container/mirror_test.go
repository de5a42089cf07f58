package container

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMirrorIn(t *testing.T) {
	deb822 := `Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb-src deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
`
	assert.Equal(t, "http://mirror.example/debian", mirrorIn(deb822, true))
	assert.Equal(t, "", mirrorIn("Types: deb\nURIs: http://x/debian\nSuites: bookworm\nEnabled: no\n", true))

	list := `# deb http://commented.example/debian bookworm main
deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main
deb http://later.example/debian bookworm main
`
	assert.Equal(t, "http://mirror.example/debian", mirrorIn(list, false))
	assert.Equal(t, "", mirrorIn("deb-src http://x/debian bookworm main\n", false))
}
