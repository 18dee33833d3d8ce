package doccheck

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRead: the two forms of list are read as the package doc says, from
// a package written for the test.
func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := `package p

// Option configures [New] or [NewOther].
type Option interface{ apply() }

type opt struct{}

func (opt) apply() {}

// WithA sets a. For [New], [NewOther] and [NewThird] (see the package).
func WithA() Option { return opt{} }

// WithB sets b. For instance 3. For [New]; the others refuse it.
func WithB(n int) Option { return opt{} }

// WithC has no list.
func WithC() Option { return opt{} }

// New builds. The options that apply are [WithA], [WithB] (not with
// [Other]) and [WithC]; any other is an error.
func New(opts ...Option) (*T, error) { return nil, nil }

// NewOther lists none.
func NewOther(x int, opts ...Option) *T { return nil }

// T is built.
type T struct{}

func notExported(opts ...Option) {}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\n// WithTest is a test's. For [New].\nfunc WithTest() Option { return opt{} }\n"), 0o600))
	p, err := Read(dir, "Option")
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"WithA": {"New", "NewOther", "NewThird"},
		"WithB": {"New"},
		"WithC": nil,
	}, p.Options)
	assert.Equal(t, map[string][]string{
		"New":      {"WithA", "WithB", "WithC"},
		"NewOther": nil,
	}, p.Constructors)
	assert.Equal(t, "Option configures [New] or [NewOther].", p.TypeDoc)
}
