// Command lockstep checks that the repository's Go modules can only be
// released together.
//
// The adapters (redislimit, grpclimit, otellimit) import the root module's
// internal packages, which is safe only if every module is tested and
// released with the same commit of the root. So, over every go.mod below
// the repository root:
//
//   - every requirement of a module of this repository names one version,
//     the same everywhere (the release being prepared; until the first tag
//     the zero pseudo-version);
//   - every such requirement is replaced by the module's own directory, so
//     that the tests run against this checkout and not a published release;
//   - every module that requires one of this repository's modules is in
//     go.work, so that the workspace's one test command covers it.
//
// A release bumps every requirement to the new version in one commit and
// tags every module at it. Usage, from anywhere:
//
//	go run . [repository root]
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

func main() {
	root := "../.."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	problems, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockstep:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "lockstep:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Println("lockstep: every module requires this repository's modules at one version, replaced by this checkout")
}

// module is one go.mod of the repository.
type module struct {
	dir  string // relative to the root, slash-separated ("." for the root)
	file *modfile.File
}

// check returns the problems found under root, one sentence each, in a
// stable order; an error only when the files cannot be read.
func check(root string) ([]string, error) {
	mods, err := readModules(root)
	if err != nil {
		return nil, err
	}
	dirOf := map[string]string{} // module path -> its directory
	for _, m := range mods {
		dirOf[m.file.Module.Mod.Path] = m.dir
	}
	used, hasWork, err := workspace(root)
	if err != nil {
		return nil, err
	}
	var problems []string
	versions := map[string][]string{} // version -> "dir requires path"
	for _, m := range mods {
		requiresOurs := false
		for _, r := range m.file.Require {
			dep, ok := dirOf[r.Mod.Path]
			if !ok {
				continue
			}
			requiresOurs = true
			versions[r.Mod.Version] = append(versions[r.Mod.Version], m.dir+" requires "+r.Mod.Path)
			rep := replacement(m.file, r.Mod.Path, r.Mod.Version)
			switch {
			case rep == nil:
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s %s without replacing it by ./%s: its tests would run against a release, not this checkout", m.dir, r.Mod.Path, r.Mod.Version, dep))
			case rep.New.Version != "" || !isLocal(rep.New.Path):
				problems = append(problems, fmt.Sprintf("%s/go.mod replaces %s by %s, not by its directory ./%s", m.dir, r.Mod.Path, rep.New, dep))
			case filepath.ToSlash(filepath.Join(m.dir, rep.New.Path)) != dep:
				problems = append(problems, fmt.Sprintf("%s/go.mod replaces %s by %s, which is ./%s, not its directory ./%s", m.dir, r.Mod.Path, rep.New.Path, filepath.ToSlash(filepath.Join(m.dir, rep.New.Path)), dep))
			}
		}
		if requiresOurs && hasWork && !used[m.dir] {
			problems = append(problems, fmt.Sprintf("%s is not in go.work: the workspace's test command does not cover it", m.dir))
		}
	}
	if len(versions) > 1 {
		var vs []string
		for v, where := range versions {
			sort.Strings(where)
			vs = append(vs, fmt.Sprintf("%s (%s)", v, strings.Join(where, ", ")))
		}
		sort.Strings(vs)
		problems = append(problems, "this repository's modules are required at more than one version: "+strings.Join(vs, "; "))
	}
	sort.Strings(problems)
	return problems, nil
}

// readModules parses every go.mod below root, skipping hidden directories
// and testdata (whose modules are fixtures, not parts of the repository).
func readModules(root string) ([]module, error) {
	var mods []module
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(path, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("%s: no module directive", path)
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		mods = append(mods, module{dir: filepath.ToSlash(rel), file: f})
		return nil
	})
	if len(mods) == 0 && err == nil {
		err = errors.New(root + ": no go.mod below it")
	}
	return mods, err
}

// workspace returns the directories go.work uses, relative to root, and
// whether there is a go.work.
func workspace(root string) (map[string]bool, bool, error) {
	path := filepath.Join(root, "go.work")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	w, err := modfile.ParseWork(path, data, nil)
	if err != nil {
		return nil, false, err
	}
	used := map[string]bool{}
	for _, u := range w.Use {
		used[filepath.ToSlash(filepath.Clean(u.Path))] = true
	}
	return used, true, nil
}

// replacement returns f's replace directive for path at version, the one
// for every version if there is no exact one, or nil.
func replacement(f *modfile.File, path, version string) *modfile.Replace {
	i := slices.IndexFunc(f.Replace, func(r *modfile.Replace) bool {
		return r.Old.Path == path && r.Old.Version == version
	})
	if i < 0 {
		i = slices.IndexFunc(f.Replace, func(r *modfile.Replace) bool {
			return r.Old.Path == path && r.Old.Version == ""
		})
	}
	if i < 0 {
		return nil
	}
	return f.Replace[i]
}

// isLocal reports whether a replacement path is a directory (as the go
// command reads it: it starts with ./ or ../, or is absolute).
func isLocal(p string) bool {
	return strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") || p == "." || p == ".." || filepath.IsAbs(p)
}
