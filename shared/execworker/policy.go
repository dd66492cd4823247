package execworker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// BaseEnv names the variables of the worker's environment every command
// gets; Config.PassEnv adds more. The rest of the worker's environment
// (its AWS credentials, an API key) never reaches a command.
var BaseEnv = []string{"PATH", "HOME", "LANG", "TZ", "TMPDIR"}

// reservedEnvPrefix marks the variables the worker sets itself.
const reservedEnvPrefix = "RUNLEDGER_"

// Variables that change what a command loads or runs rather than what it
// computes: the dynamic loader's, the shells' startup and option
// variables, the interpreters' option and module paths, git's and make's
// configuration, and where programs find their configuration. A payload
// sets one only when --allow-env names it exactly (a glob never admits
// it). Matched case-insensitively: some programs read them in any case.
var (
	loaderEnvNames = []string{
		"BASH_ENV", "ENV", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "IFS", "CDPATH", "GLOBIGNORE", "ZDOTDIR",
		"PATH", "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS",
		"GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES",
		"NODE_OPTIONS", "NODE_PATH", "PERLLIB", "RUBYOPT", "RUBYLIB",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
		"PHPRC", "PHP_INI_SCAN_DIR", "MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS", "SSH_ASKPASS",
	}
	loaderEnvPrefixes = []string{"LD_", "DYLD_", "GIT_", "PYTHON", "PERL5", "BASH_FUNC_", "LUA_", "NPM_CONFIG_"}
)

// LoaderEnv says whether name is one of the variables a glob of
// --allow-env never admits.
func LoaderEnv(name string) bool {
	up := strings.ToUpper(name)
	if slices.Contains(loaderEnvNames, up) {
		return true
	}
	return slices.ContainsFunc(loaderEnvPrefixes, func(p string) bool { return strings.HasPrefix(up, p) })
}

// EnvAllowlist says which variables a payload's env may set. The zero
// value admits none.
type EnvAllowlist struct {
	patterns []string
}

// NewEnvAllowlist checks the patterns: globs (path.Match syntax) over
// variable names. A RUNLEDGER_* name is refused: the worker sets those.
func NewEnvAllowlist(patterns []string) (EnvAllowlist, error) {
	for _, p := range patterns {
		if p == "" {
			return EnvAllowlist{}, errors.New("allow-env pattern is empty")
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return EnvAllowlist{}, fmt.Errorf("allow-env pattern %q: %w", p, err)
		}
		if strings.HasPrefix(p, reservedEnvPrefix) {
			return EnvAllowlist{}, fmt.Errorf("allow-env pattern %q: RUNLEDGER_* variables are the worker's own", p)
		}
	}
	return EnvAllowlist{patterns: slices.Clone(patterns)}, nil
}

// Check answers nil when a payload may set name: a pattern matches it,
// and, for a LoaderEnv name, a pattern is that very name.
func (a EnvAllowlist) Check(name string) error {
	if strings.HasPrefix(name, reservedEnvPrefix) {
		return fmt.Errorf("env %s: RUNLEDGER_* variables are the worker's own", name)
	}
	if slices.Contains(a.patterns, name) {
		return nil
	}
	if LoaderEnv(name) {
		return fmt.Errorf("env %s changes what the command loads or runs: the worker admits it only when --allow-env names it exactly", name)
	}
	for _, p := range a.patterns {
		if ok, _ := filepath.Match(p, name); ok {
			return nil
		}
	}
	return fmt.Errorf("env %s matches no --allow-env pattern of the worker", name)
}

// DirAllowlist says which working directories a payload may name: the
// worker's own, and any directory at or under an allowed one, compared
// once symlinks are resolved.
type DirAllowlist struct {
	wd    string
	roots []string
}

// NewDirAllowlist resolves the worker's working directory and each of
// dirs (which must exist).
func NewDirAllowlist(dirs []string) (DirAllowlist, error) {
	wd, err := os.Getwd()
	if err != nil {
		return DirAllowlist{}, err
	}
	if wd, err = filepath.EvalSymlinks(wd); err != nil {
		return DirAllowlist{}, err
	}
	a := DirAllowlist{wd: wd}
	for _, d := range dirs {
		if d == "" {
			return DirAllowlist{}, errors.New("allow-dir is empty")
		}
		r, err := resolvePath(d)
		if err != nil {
			return DirAllowlist{}, fmt.Errorf("allow-dir %q: %w", d, err)
		}
		if st, err := os.Stat(r); err != nil || !st.IsDir() {
			return DirAllowlist{}, fmt.Errorf("allow-dir %q is not a directory", d)
		}
		a.roots = append(a.roots, r)
	}
	return a, nil
}

// Resolve answers dir with its symlinks resolved when a payload may run
// a command there; "" stays "" (the worker's own directory).
func (a DirAllowlist) Resolve(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	r, err := resolvePath(dir)
	if err != nil {
		return "", fmt.Errorf("dir %q: %w", dir, err)
	}
	if r == a.wd || slices.ContainsFunc(a.roots, func(root string) bool { return within(root, r) }) {
		return r, nil
	}
	return "", fmt.Errorf("dir %q (%s) is neither the worker's working directory nor under an --allow-dir", dir, r)
}

// resolvePath is p absolute, cleaned, with every symlink resolved.
func resolvePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// within says whether p is root or under it (both clean and absolute).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// environment is what a command starts from: the BaseEnv and pass names
// of environ, or, with inherit, all of environ but RUNLEDGER_* names.
func environment(environ, pass []string, inherit bool) []string {
	var env []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case inherit && !strings.HasPrefix(k, reservedEnvPrefix),
			!inherit && (slices.Contains(BaseEnv, k) || slices.Contains(pass, k)):
			env = append(env, kv)
		}
	}
	return env
}
