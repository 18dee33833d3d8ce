package doccheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocsReadInAMinute holds every library package's doc to 120
// lines (issue 25): long design text goes to docs/, not the package doc.
// A package doc is the comment of every file's package clause, together.
func TestPackageDocsReadInAMinute(t *testing.T) {
	for _, dir := range []string{".", "httplimit", "grpclimit", "redislimit", "otellimit"} {
		path := filepath.Join("..", "..", "..", dir)
		files, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", path, err)
		}
		lines := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil {
				lines += strings.Count(af.Doc.Text(), "\n")
			}
		}
		if lines == 0 || lines > 120 {
			t.Errorf("package %s: doc of %d lines, want 1 to 120", dir, lines)
		} else {
			t.Logf("package %s: doc of %d lines", dir, lines)
		}
	}
}
