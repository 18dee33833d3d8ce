package envoylimit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envoyRatelimitModule is the version of envoyproxy/ratelimit whose own
// configuration files the tests load: .ci/run downloads it into the module
// cache (go mod download), the tests read it there.
const envoyRatelimitModule = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"

// envoyRatelimitDir returns the module's directory in the module cache;
// without it the test fails under CI and is skipped elsewhere.
func envoyRatelimitDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	require.NoError(t, err)
	dir := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(envoyRatelimitModule))
	if _, err := os.Stat(dir); err != nil {
		msg := "envoyproxy/ratelimit's files are not in the module cache; run: go mod download " + envoyRatelimitModule
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// envoyproxy/ratelimit's example configurations and the good ones of its
// tests load unchanged; its bad ones are refused.
func TestEnvoyRatelimitConfigFiles(t *testing.T) {
	dir := envoyRatelimitDir(t)
	cfg, err := envoylimit.LoadConfig(filepath.Join(dir, "examples/ratelimit/config"))
	require.NoError(t, err)
	assert.Equal(t, []string{"mongo_cps", "rl"}, cfg.Domains())

	for _, f := range []string{"basic_config", "shadowmode_config", "share_threshold", "wildcard"} {
		_, err := envoylimit.LoadConfig(filepath.Join(dir, "test/config", f+".yaml"))
		assert.NoError(t, err, f)
	}
	_, err = envoylimit.LoadConfig(filepath.Join(dir, "test/config/merge_domain_key1.yaml"), filepath.Join(dir, "test/config/merge_domain_key2.yaml"))
	assert.ErrorContains(t, err, "is already defined in", "one domain in two files")
	_, err = envoylimit.LoadConfig(filepath.Join(dir, "test/config/basic_config.yaml"), filepath.Join(dir, "test/config/duplicate_domain.yaml"))
	assert.ErrorContains(t, err, `domain "test-domain" is already defined in`)

	for f, want := range map[string]string{
		"bad_limit_unit":      `:6: unknown unit "foo"`,
		"bad_yaml":            "",
		"duplicate_key":       `:6: duplicate descriptor "test-domain.key1_value1"`,
		"empty_domain":        ":1: the domain must be given",
		"empty_key":           ":3: a descriptor must have a key",
		"misspelled_key":      `:5: unknown key "ratelimit" in a descriptor`,
		"misspelled_key2":     `:7: unknown key "requestsperunit" in a rate_limit`,
		"non_map_list":        ":3: a descriptor must be a mapping",
		"non_string_key":      `:1: unknown key "0.25"`,
		"replaces_empty":      ":10: a replaces entry must have a name",
		"replaces_self":       `:10: a limit cannot replace itself ("self")`,
		"unlimited_with_unit": ":6: an unlimited rate_limit takes no unit",
	} {
		path := filepath.Join(dir, "test/config", f+".yaml")
		_, err := envoylimit.LoadConfig(path)
		require.Error(t, err, f)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, f)
		assert.ErrorContains(t, err, "ratelimit: envoylimit: "+path, f)
		assert.ErrorContains(t, err, want, f)
	}
}

// The YAML examples of envoyproxy/ratelimit's README load, but for the
// fragments that are not whole files (the format's outline, a lone
// rate_limit block).
func TestEnvoyRatelimitReadmeExamples(t *testing.T) {
	dir := envoyRatelimitDir(t)
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(readme, -1)
	loaded := 0
	for _, b := range blocks {
		text := string(b[1])
		if !strings.HasPrefix(text, "domain: ") || strings.Contains(text, "<") {
			continue // not a configuration file
		}
		_, err := envoylimit.ParseConfig("README.md", b[1])
		assert.NoError(t, err, text)
		loaded++
	}
	assert.GreaterOrEqual(t, loaded, 10, "the README's examples")
}

// A bad file's error names the file and line and what is wrong.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n", "f.yaml:5: a rate_limit needs requests_per_unit"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: -1\n", "f.yaml:6: requests_per_unit must be a whole number"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      window: 30s\n", "f.yaml:7: a rate_limit has unit or window, not both"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      window: soon\n      requests_per_unit: 5\n", `f.yaml:5: window must be a positive duration such as 30s or 5m, got "soon"`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: gcra\n      unit: second\n      requests_per_unit: 5\n", `f.yaml:5: unknown algorithm "gcra"`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: quota\n      unit: minute\n      requests_per_unit: 5\n", `f.yaml:5: a quota needs unit day, week, month or year`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      burst: 9\n", `f.yaml:7: burst applies to algorithm tokenbucket or leakybucket, not fixedwindow`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: quota\n      unit: day\n      requests_per_unit: 5\n      calendar:\n        timezone: Mars/Olympus\n", `f.yaml:9: timezone must be an IANA zone name`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: leakybucket\n      unit: second\n      requests_per_unit: 7\n", `f.yaml:7: a leaky bucket leaks one request every unit/requests_per_unit`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: []\n", `f.yaml:5: a descriptor has rate_limit or rate_limits, not both`},
		{"domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n", `f.yaml:4: share_threshold needs a wildcard value`},
		{"domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", `f.yaml:4: shadow_mode must be true or false, got "maybe"`},
		{"domain: d\nfoo: 1\n", `f.yaml:2: unknown key "foo" in the file's top level`},
		{"domain: d\ndescriptors:\n - key: k\n   value: [\n", `f.yaml:4: invalid YAML`},
		{"", `f.yaml: no domain: the file is empty`},
		{"domain: a\n---\ndomain: a\n", `f.yaml:3: domain "a" is already defined in f.yaml`},
	} {
		_, err := envoylimit.ParseConfig("f.yaml", []byte(tc.yaml))
		require.Error(t, err, tc.yaml)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "ratelimit: envoylimit: "+tc.want, tc.yaml)
		var ce *envoylimit.ConfigError
		assert.ErrorAs(t, err, &ce)
	}
}

// A directory's .yaml and .yml files load in name order, one domain each
// (several YAML documents per file are several domains); other files and
// dot files are ignored.
func TestLoadConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write("a.yaml", "domain: a\n---\ndomain: b\n")
	write("c.yml", "domain: c\n")
	write(".hidden.yaml", "not: valid\n")
	write("notes.txt", "not yaml: [")
	cfg, err := envoylimit.LoadConfig(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, cfg.Domains())

	_, err = envoylimit.LoadConfig(filepath.Join(dir, "missing.yaml"))
	assert.ErrorContains(t, err, "ratelimit: envoylimit: "+filepath.Join(dir, "missing.yaml"))
	_, err = envoylimit.LoadConfig()
	assert.ErrorContains(t, err, "no configuration path given")
}
