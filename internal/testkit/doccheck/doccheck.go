// Package doccheck reads, from a package's source, what the documentation
// says about which constructors each option applies to, so that a test of
// that package can compare it with what the constructors accept. It is
// used by tests only.
//
// Two forms are read, in doc comments as gofmt leaves them:
//
//   - An option's doc (an exported function returning the option type)
//     ends its list of constructors with a sentence "For [A], [B] and
//     [C]." (the last such sentence counts; the list ends at the first
//     word that is not a link or a separator).
//   - A constructor's doc (an exported function whose last parameter is
//     ...Option) lists its options after "the options that apply are"
//     (any case): links separated by commas and "and", a parenthesized
//     remark after a link skipped, up to the end of the sentence.
package doccheck

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Package is what one package's documentation says.
type Package struct {
	// Options maps each exported function returning the option type to
	// the constructors its doc's "For [...]" sentence names (nil: no such
	// sentence).
	Options map[string][]string
	// Constructors maps each exported function taking ...Option to the
	// options its doc lists after "the options that apply are" (nil: no
	// such list).
	Constructors map[string][]string
	// Docs holds the doc text of every function above, whitespace folded.
	Docs map[string]string
	// TypeDoc is the option type's doc, whitespace folded.
	TypeDoc string
	// TypeDocs holds the doc of each option type (with several), folded.
	TypeDocs map[string]string
	// Takes maps each constructor to the option type it takes.
	Takes map[string]string
}

// Read parses the non-test Go files of the package in dir and returns
// what their docs say about the option type named option, and the types
// named more (a package with one option type per constructor family).
func Read(dir, option string, more ...string) (*Package, error) {
	types := append([]string{option}, more...)
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	if len(pkgs) != 1 {
		return nil, fmt.Errorf("doccheck: %d packages in %s, want 1", len(pkgs), dir)
	}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool { return fset.File(files[i].Pos()).Name() < fset.File(files[j].Pos()).Name() })
	dp, err := doc.NewFromFiles(fset, files, "example.com/checked")
	if err != nil {
		return nil, err
	}
	p := &Package{Options: map[string][]string{}, Constructors: map[string][]string{}, Docs: map[string]string{},
		TypeDocs: map[string]string{}, Takes: map[string]string{}}
	funcs := append([]*doc.Func(nil), dp.Funcs...)
	for _, t := range dp.Types {
		funcs = append(funcs, t.Funcs...)
		if slices.Contains(types, t.Name) {
			p.TypeDocs[t.Name] = strings.Join(strings.Fields(t.Doc), " ")
		}
	}
	for _, f := range funcs {
		if !ast.IsExported(f.Name) || f.Recv != "" {
			continue
		}
		text := strings.Join(strings.Fields(f.Doc), " ")
		for _, typ := range types {
			switch {
			case returns(f.Decl, typ):
				p.Options[f.Name] = forList(text)
				p.Docs[f.Name] = text
			case variadic(f.Decl, typ):
				p.Constructors[f.Name] = applyList(text)
				p.Docs[f.Name] = text
				p.Takes[f.Name] = typ
			}
		}
	}
	p.TypeDoc = p.TypeDocs[option]
	return p, nil
}

// returns reports whether fn returns exactly one value of type name.
func returns(fn *ast.FuncDecl, name string) bool {
	r := fn.Type.Results
	if r == nil || len(r.List) != 1 || len(r.List[0].Names) > 1 {
		return false
	}
	id, ok := r.List[0].Type.(*ast.Ident)
	return ok && id.Name == name
}

// variadic reports whether fn's last parameter is ...name.
func variadic(fn *ast.FuncDecl, name string) bool {
	ps := fn.Type.Params.List
	if len(ps) == 0 {
		return false
	}
	e, ok := ps[len(ps)-1].Type.(*ast.Ellipsis)
	if !ok {
		return false
	}
	id, ok := e.Elt.(*ast.Ident)
	return ok && id.Name == name
}

var (
	forSentence = regexp.MustCompile(`\bFor \[`)
	applyPhrase = regexp.MustCompile(`(?i)\bthe options that apply are `)
	link        = regexp.MustCompile(`^\[([A-Za-z_][A-Za-z0-9_.]*)\]`)
	separator   = regexp.MustCompile(`^(, and |, | and )`)
)

// forList returns the links of the last "For [...]" sentence of text.
func forList(text string) []string {
	locs := forSentence.FindAllStringIndex(text, -1)
	if len(locs) == 0 {
		return nil
	}
	rest := text[locs[len(locs)-1][1]-1:]
	return links(rest, false)
}

// applyList returns the links listed after "the options that apply are".
func applyList(text string) []string {
	loc := applyPhrase.FindStringIndex(text)
	if loc == nil {
		return nil
	}
	return links(text[loc[1]:], true)
}

// links reads links separated by commas and "and" from the start of s,
// skipping a parenthesized remark after a link when remarks is set.
func links(s string, remarks bool) []string {
	var out []string
	for {
		m := link.FindStringSubmatch(s)
		if m == nil {
			return out
		}
		out = append(out, m[1])
		s = s[len(m[0]):]
		if remarks && strings.HasPrefix(s, " (") {
			if end := strings.IndexByte(s, ')'); end >= 0 {
				s = s[end+1:]
			}
		}
		sep := separator.FindString(s)
		if sep == "" {
			return out
		}
		s = s[len(sep):]
	}
}

// Check compares, for a package whose docs are p, what the constructors
// accept with what the docs say: the option type's doc names every
// constructor that takes options; every option read from the source must
// have a sample (a valid value of it) and every constructor taking
// options a wrapper (a call with valid arguments and the one option
// given), and for each pair, the constructor accepts the option exactly
// when the option's doc names the constructor and the constructor's doc
// lists the option. A constructor refuses an option that does not apply
// to it with an error saying "applies to" (with several option types, the
// test's wrapper says so for an option of another type, which would not
// compile: see [TypeErrors]); any other error is a sample that should
// have been valid.
func Check[O any](t testing.TB, p *Package, samples map[string]O, constructors map[string]func(O) error) {
	t.Helper()
	if missing, extra := diff(keys(p.Options), keys(samples)); len(missing)+len(extra) > 0 {
		t.Errorf("options without a sample (give one, and document where they apply): %v; samples of no option: %v", missing, extra)
	}
	if missing, extra := diff(keys(p.Constructors), keys(constructors)); len(missing)+len(extra) > 0 {
		t.Errorf("constructors taking options without a wrapper here: %v; wrappers of no constructor: %v", missing, extra)
	}
	for _, name := range keys(p.Options) {
		if len(p.Options[name]) == 0 {
			t.Errorf("%s's doc has no \"For [...]\" sentence naming its constructors: %q", name, p.Docs[name])
		}
	}
	for _, name := range keys(p.Constructors) {
		if len(p.Constructors[name]) == 0 {
			t.Errorf("%s's doc does not list its options (\"The options that apply are ...\"): %q", name, p.Docs[name])
		}
	}
	for _, name := range keys(p.Constructors) {
		if doc := p.TypeDocs[p.Takes[name]]; !strings.Contains(doc, "["+name+"]") {
			t.Errorf("the doc of %s, the option type %s takes, does not name it: %q", p.Takes[name], name, doc)
		}
	}
	for _, oname := range keys(samples) {
		for _, cname := range keys(constructors) {
			err := constructors[cname](samples[oname])
			accepted := err == nil
			if err != nil && !strings.Contains(err.Error(), "applies to") {
				t.Errorf("%s given to %s: %v (the sample should be valid)", oname, cname, err)
				continue
			}
			if slices.Contains(p.Options[oname], cname) != accepted {
				t.Errorf("%s: %s accepts it = %v, but its doc says For %v", oname, cname, accepted, p.Options[oname])
			}
			if slices.Contains(p.Constructors[cname], oname) != accepted {
				t.Errorf("%s: accepts %s = %v, but its doc lists %v", cname, oname, accepted, p.Constructors[cname])
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// diff returns the names of want not in got, and of got not in want.
func diff(want, got []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}

// TypeErrors type-checks src, the text of a Go file that imports packages
// of the module holding dir (export data from `go list -export`, run in
// dir), and returns its type errors: a test that an option given to the
// wrong constructor does not compile.
func TypeErrors(t testing.TB, dir, src string) []types.Error {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", src, 0)
	if err != nil {
		t.Fatalf("doccheck.TypeErrors: %v", err)
	}
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	for _, im := range f.Imports {
		args = append(args, strings.Trim(im.Path.Value, `"`))
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("doccheck.TypeErrors: go list: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok {
			exports[path] = file
		}
	}
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	}
	var errs []types.Error
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", lookup),
		Error:    func(err error) { errs = append(errs, err.(types.Error)) },
	}
	_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
	return errs
}
