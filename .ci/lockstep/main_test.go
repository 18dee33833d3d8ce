package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repo writes a repository of go.mod files (directory -> contents) and a
// go.work using the directories in work (none: no go.work), and returns
// its root.
func repo(t *testing.T, mods map[string]string, work ...string) string {
	t.Helper()
	root := t.TempDir()
	for dir, text := range mods {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "go.mod"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(work) > 0 {
		text := "go 1.25\n\nuse (\n\t" + strings.Join(work, "\n\t") + "\n)\n"
		if err := os.WriteFile(filepath.Join(root, "go.work"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	rootMod = "module example.com/lib\n\ngo 1.22\n"
	zero    = "v0.0.0-00010101000000-000000000000"
)

// adapter is the go.mod of a module in dir requiring the root module (at
// version, replaced by replace when it is not empty) and whatever else
// extra says.
func adapter(path, version, replace, extra string) string {
	s := "module " + path + "\n\ngo 1.24\n\nrequire example.com/lib " + version + "\n" + extra
	if replace != "" {
		s += "\nreplace example.com/lib => " + replace + "\n"
	}
	return s
}

func TestLockstep(t *testing.T) {
	for _, tc := range []struct {
		name string
		mods map[string]string
		work []string
		want []string // substrings, one per problem, in order; none: clean
	}{
		{
			name: "released together",
			mods: map[string]string{
				".":              rootMod,
				"redis":          adapter("example.com/lib/redis", zero, "../", ""),
				"examples/redis": adapter("example.com/lib/examples/redis", zero, "../..", "require example.com/lib/redis "+zero+"\nreplace example.com/lib/redis => ../../redis\n"),
			},
			work: []string{".", "./redis", "./examples/redis"},
		},
		{
			name: "two versions",
			mods: map[string]string{
				".":     rootMod,
				"redis": adapter("example.com/lib/redis", "v1.2.0", "../", ""),
				"grpc":  adapter("example.com/lib/grpc", "v1.3.0", "..", ""),
			},
			want: []string{"more than one version: v1.2.0 (redis requires example.com/lib); v1.3.0 (grpc requires example.com/lib)"},
		},
		{
			name: "not replaced",
			mods: map[string]string{".": rootMod, "redis": adapter("example.com/lib/redis", "v1.2.0", "", "")},
			want: []string{"redis/go.mod requires example.com/lib v1.2.0 without replacing it by ./."},
		},
		{
			name: "replaced by another directory",
			mods: map[string]string{".": rootMod, "x/redis": adapter("example.com/lib/redis", zero, "../", "")},
			want: []string{"x/redis/go.mod replaces example.com/lib by ../, which is ./x, not its directory ./."},
		},
		{
			name: "replaced by a release",
			mods: map[string]string{".": rootMod, "redis": adapter("example.com/lib/redis", zero, "example.com/fork v1.0.0", "")},
			want: []string{"redis/go.mod replaces example.com/lib by example.com/fork@v1.0.0, not by its directory"},
		},
		{
			name: "outside the workspace",
			mods: map[string]string{".": rootMod, "redis": adapter("example.com/lib/redis", zero, "..", "")},
			work: []string{"."},
			want: []string{"redis is not in go.work"},
		},
		{
			name: "fixtures and hidden directories are not modules of the repository",
			mods: map[string]string{
				".":                rootMod,
				"redis/testdata/x": adapter("example.com/x", "v9.9.9", "", ""),
				".ci/tool":         adapter("example.com/tool", "v9.9.8", "", ""),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := check(repo(t, tc.mods, tc.work...))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// TestThisRepository holds the repository itself to the rule.
func TestThisRepository(t *testing.T) {
	problems, err := check("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func TestNoModule(t *testing.T) {
	if _, err := check(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no go.mod") {
		t.Fatalf("err = %v, want no go.mod", err)
	}
}
