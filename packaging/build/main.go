// Command build makes what an operator installs, in dist/ at the top of
// the repository:
//
//	dist/safefs                      the static binary, version stamped in
//	dist/safefs.8                    the man page, made from docs/manual.md
//	dist/safefs_VERSION_ARCH.deb     both, the systemd unit and the docs
//
// Run it from packaging/ (make deb does): go run ./build [-deb=false]
// [-arch GOARCH] [-o DIR]. The version is the VERSION file's; the commit
// is git's (with -dirty for a tree with changes); the date is
// SOURCE_DATE_EPOCH's, else the commit's, so that two builds of one
// commit are the same bytes. The .deb is written by nfpm; this module is
// apart from safefs's own, so that nfpm is no dependency of safefs.
package main

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/safefs/safefs/packaging/manpage"
)

// Where the package puts things. mount.fuse3 runs safefs through /bin/sh
// with the shell's default PATH, which holds /usr/sbin.
const (
	binPath   = "/usr/sbin/safefs"
	manPath   = "/usr/share/man/man8/safefs.8.gz"
	unitPath  = "/lib/systemd/system/safefs.service"
	docDir    = "/usr/share/doc/safefs"
	sourceBin = "/usr/local/bin/safefs" // contrib/safefs.service's, for a binary built by hand
)

// docs are installed in docDir; the man page's SEE ALSO names them.
var docs = []string{"README.md", "docs/manual.md", "docs/operations.md", "docs/design.md",
	"docs/threat-model.md", "docs/testing.md", "docs/benchmarks.md"}

// examples are the CGI scripts of operations.md's walkthrough.
var examples = []string{"contrib/cgi/counter.pl", "contrib/cgi/guestbook.pl"}

func main() {
	out := flag.String("o", "", "output directory (default: dist at the top of the repository)")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH to build for")
	makeDeb := flag.Bool("deb", true, "make the .deb too, not only the binary and the man page")
	maintainer := flag.String("maintainer", "safefs maintainers <maintainers@safefs.invalid>", "the package's Maintainer field")
	flag.Parse()
	if err := run(*out, *arch, *makeDeb, *maintainer); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
}

func run(out, arch string, makeDeb bool, maintainer string) error {
	root, err := findRoot()
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(root, "dist")
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	s, err := readStamp(root)
	if err != nil {
		return err
	}
	bin := filepath.Join(out, "safefs")
	if err := buildBinary(root, bin, arch, s); err != nil {
		return err
	}
	manual, err := os.ReadFile(filepath.Join(root, "docs/manual.md"))
	if err != nil {
		return err
	}
	page, err := manpage.Render(manual, s.version, s.date)
	if err != nil {
		return fmt.Errorf("man page: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "safefs.8"), page, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s\n%s\n", bin, filepath.Join(out, "safefs.8"))
	if !makeDeb {
		return nil
	}
	name, err := buildDeb(root, out, arch, maintainer, s, page)
	if err != nil {
		return fmt.Errorf("deb: %w", err)
	}
	fmt.Println(name)
	return nil
}

// findRoot is the repository's top: the first directory up from here
// that holds VERSION and cmd/safefs.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cmd/safefs/main.go")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "VERSION")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no VERSION and cmd/safefs above the working directory: run this from the repository")
		}
		dir = parent
	}
}

// stamp is what the binary and the package are stamped with.
type stamp struct {
	version string // VERSION's: a Debian version without a revision
	commit  string // "" outside git
	date    time.Time
}

var debVersion = regexp.MustCompile(`^[0-9][0-9A-Za-z.+~]*$`)

func readStamp(root string) (stamp, error) {
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return stamp{}, err
	}
	s := stamp{version: strings.TrimSpace(string(b))}
	if !debVersion.MatchString(s.version) {
		return stamp{}, fmt.Errorf("VERSION %q: want a version such as 0.1.0 (a digit first, then digits, letters, . + ~)", s.version)
	}
	if c, err := git(root, "rev-parse", "--short=12", "HEAD"); err == nil {
		s.commit = c
		if st, err := git(root, "status", "--porcelain"); err == nil && st != "" {
			s.commit += "-dirty"
		}
	}
	s.date = time.Now().UTC().Truncate(time.Second)
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return stamp{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
		}
		s.date = time.Unix(n, 0).UTC()
	} else if ct, err := git(root, "log", "-1", "--format=%ct"); err == nil {
		if n, err := strconv.ParseInt(ct, 10, 64); err == nil {
			s.date = time.Unix(n, 0).UTC()
		}
	}
	return s, nil
}

func git(root string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

// buildBinary builds cmd/safefs static (CGO_ENABLED=0) with the stamp.
func buildBinary(root, bin, arch string, s stamp) error {
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s -X main.date=%s",
		s.version, s.commit, s.date.Format(time.RFC3339))
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, "./cmd/safefs")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	return checkStatic(bin)
}

// checkStatic refuses a binary that needs a dynamic loader: mount.fuse3
// runs it on hosts that may lack the build machine's libc.
func checkStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is not static (it has an ELF interpreter)", bin)
		}
	}
	return nil
}

// unit is contrib/safefs.service with the package's binary path.
func unit(root string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, "contrib/safefs.service"))
	if err != nil {
		return nil, err
	}
	if n := bytes.Count(b, []byte("ExecStart="+sourceBin+" ")); n != 1 {
		return nil, fmt.Errorf("contrib/safefs.service: want one ExecStart=%s line, found %d", sourceBin, n)
	}
	return bytes.ReplaceAll(b, []byte(sourceBin), []byte(binPath)), nil
}

// gzipped is data compressed as dh_compress would, with no name or time
// in the header.
func gzipped(data []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	err = w.Close()
	return b.Bytes(), err
}

func buildDeb(root, out, arch, maintainer string, s stamp, page []byte) (string, error) {
	staged := filepath.Join(out, "staged")
	if err := os.RemoveAll(staged); err != nil {
		return "", err
	}
	if err := os.MkdirAll(staged, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(staged)
	gz, err := gzipped(page)
	if err != nil {
		return "", err
	}
	u, err := unit(root)
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"safefs.8.gz": gz, "safefs.service": u} {
		if err := os.WriteFile(filepath.Join(staged, name), data, 0o644); err != nil {
			return "", err
		}
	}
	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode, MTime: s.date}}
	}
	contents := files.Contents{
		file(filepath.Join(out, "safefs"), binPath, 0o755),
		file(filepath.Join(staged, "safefs.8.gz"), manPath, 0o644),
		file(filepath.Join(staged, "safefs.service"), unitPath, 0o644),
	}
	for _, d := range docs {
		contents = append(contents, file(filepath.Join(root, d), docDir+"/"+filepath.Base(d), 0o644))
	}
	for _, e := range examples {
		contents = append(contents, file(filepath.Join(root, e), docDir+"/examples/"+filepath.Base(e), 0o644))
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "safefs",
		Arch:          arch,
		Platform:      "linux",
		Version:       s.version,
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    maintainer,
		Homepage:      "https://github.com/safefs/safefs",
		Description: "FUSE file system that makes every write to a directory atomic\n" +
			"Mounted over the data directory of legacy programs (old CGI scripts above\n" +
			"all), safefs publishes each close() as one whole new version with an atomic\n" +
			"rename, serializes commits to one file, keeps appends whole, lets a killed\n" +
			"writer commit nothing and recovers after a crash, while the scripts' own\n" +
			"locks keep working. See safefs(8) and /usr/share/doc/safefs/operations.md.",
		MTime: s.date,
		Overridables: nfpm.Overridables{
			Depends:  []string{"fuse3"},
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(root, "packaging/build/postinst"),
				PostRemove:  filepath.Join(root, "packaging/build/postrm"),
			},
		},
	})
	if err := nfpm.Validate(info); err != nil {
		return "", err
	}
	name := filepath.Join(out, deb.Default.ConventionalFileName(info))
	f, err := os.Create(name + ".tmp")
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(name + ".tmp")
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return name, os.Rename(name+".tmp", name)
}
