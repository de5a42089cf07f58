package main

import (
	"strings"
	"testing"
)

// A stream as `go test -json` writes it (trimmed): one package with a
// passing, a failing and two skipped tests (one a subtest), one whose
// build failed.
const stream = `{"Action":"start","Package":"ex/a"}
{"Action":"run","Package":"ex/a","Test":"TestPass"}
{"Action":"output","Package":"ex/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"ex/a","Test":"TestPass","Output":"    a_test.go:9: quiet when it passes\n"}
{"Action":"pass","Package":"ex/a","Test":"TestPass"}
{"Action":"run","Package":"ex/a","Test":"TestFuse"}
{"Action":"output","Package":"ex/a","Test":"TestFuse","Output":"=== RUN   TestFuse\n"}
{"Action":"output","Package":"ex/a","Test":"TestFuse","Output":"    helpers_test.go:29: needs /dev/fuse and root\n"}
{"Action":"output","Package":"ex/a","Test":"TestFuse","Output":"--- SKIP: TestFuse (0.00s)\n"}
{"Action":"skip","Package":"ex/a","Test":"TestFuse"}
{"Action":"output","Package":"ex/a","Test":"TestTool/sub","Output":"    --- SKIP: TestTool/sub (0.00s)\n"}
{"Action":"output","Package":"ex/a","Test":"TestTool/sub","Output":"        x_test.go:3: strace not installed\n"}
{"Action":"skip","Package":"ex/a","Test":"TestTool/sub"}
{"Action":"output","Package":"ex/a","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"output","Package":"ex/a","Test":"TestFail","Output":"    a_test.go:20: boom\n"}
{"Action":"output","Package":"ex/a","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"ex/a","Test":"TestFail"}
{"Action":"output","Package":"ex/a","Output":"FAIL\n"}
{"Action":"output","Package":"ex/a","Output":"FAIL\tex/a\t0.01s\n"}
{"Action":"fail","Package":"ex/a"}
{"ImportPath":"ex/b [ex/b.test]","Action":"build-output","Output":"b.go:3:2: undefined: x\n"}
{"ImportPath":"ex/b [ex/b.test]","Action":"build-fail"}
{"Action":"output","Package":"ex/c","Output":"PASS\n"}
{"Action":"output","Package":"ex/c","Output":"ok  \tex/c\t0.02s\n"}
`

func TestReport(t *testing.T) {
	var out strings.Builder
	skips := report(strings.NewReader(stream), &out)
	want := "    a_test.go:20: boom\n--- FAIL: TestFail (0.00s)\nFAIL\nFAIL\tex/a\t0.01s\nb.go:3:2: undefined: x\nok  \tex/c\t0.02s\n"
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
	wantSkips := []skip{{"ex/a", "TestFuse", "needs /dev/fuse and root"}, {"ex/a", "TestTool/sub", "strace not installed"}}
	if len(skips) != len(wantSkips) {
		t.Fatalf("skips %+v, want %+v", skips, wantSkips)
	}
	for i := range skips {
		if skips[i] != wantSkips[i] {
			t.Errorf("skip %d: %+v, want %+v", i, skips[i], wantSkips[i])
		}
	}
	var sum strings.Builder
	printSkips(&sum, skips)
	for _, s := range []string{"SKIPPED, 2 in all", "1: needs /dev/fuse and root", "ex/a TestFuse", "1: strace not installed", "ex/a TestTool/sub"} {
		if !strings.Contains(sum.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, sum.String())
		}
	}
}
