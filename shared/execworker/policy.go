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

// Variables that change what a command loads or runs, or which options
// and configuration a program takes, rather than the data it works on. A
// glob of --allow-env is for data variables: it admits only names that
// match none of these, and a payload sets one only when --allow-env names
// it exactly. Matched case-insensitively: some programs read them in any
// case. Grow the list when a program's option or hook variable turns up.
var (
	hookEnvNames = []string{
		// The dynamic loader and the C library.
		"GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "GLIBC_TUNABLES", "RESOLV_HOST_CONF",
		// The shells' startup and option variables, and the programs other
		// programs start.
		"BASH_ENV", "ENV", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "IFS", "CDPATH", "GLOBIGNORE", "ZDOTDIR",
		"SHELL", "EDITOR", "VISUAL", "PAGER", "MANPAGER", "BROWSER", "SSH_ASKPASS", "SUDO_ASKPASS",
		// Where programs find code and configuration.
		"PATH", "HOME", "TMPDIR",
		"KUBECONFIG", "KUBE_EDITOR", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"GOOGLE_APPLICATION_CREDENTIALS", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_HOME", "WGETRC", "GNUPGHOME", "HGRCPATH",
		"TF_CLI_CONFIG_FILE",
		// Interpreters: options, startup files and module paths.
		"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE", "PERLLIB", "RUBYOPT", "RUBYLIB", "GEM_HOME", "GEM_PATH",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JAVA_OPTS", "JAVA_HOME", "CLASSPATH",
		"MAVEN_OPTS", "GRADLE_OPTS", "GRADLE_USER_HOME",
		"PHPRC", "PHP_INI_SCAN_DIR", "R_PROFILE", "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER", "EMACSLOADPATH",
		// Editors' and pagers' startup commands.
		"VIMINIT", "EXINIT", "GVIMINIT", "MYVIMRC", "VIMRUNTIME", "LESS", "LESSOPEN", "LESSCLOSE", "LESSKEY",
		// Build tools and compilers.
		"MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS", "MAKEFILES",
		"GOFLAGS", "GOENV", "GOTOOLCHAIN", "GOROOT", "GOPATH", "GOBIN", "GOPROXY", "GONOPROXY", "GOPRIVATE",
		"GOSUMDB", "GONOSUMDB", "GOINSECURE", "GOAUTH", "GOEXPERIMENT", "GOCACHE", "GOMODCACHE",
		"RUSTC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTDOC", "RUSTFLAGS", "RUSTDOCFLAGS",
		"CC", "CXX", "CPP", "LD", "AS", "AR", "NM", "RANLIB", "STRIP", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "LIBS",
		"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX",
		"PKG_CONFIG", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR",
		// Archivers and copiers.
		"TAR_OPTIONS", "GZIP", "XZ_OPT", "XZ_DEFAULTS",
	}
	hookEnvPrefixes = []string{
		"LD_", "DYLD_", "BASH_FUNC_", "XDG_",
		"PYTHON", "PERL5", "LUA_", "DOTNET_", "COMPLUS_", "CORECLR_",
		"GIT_", "NPM_CONFIG_", "YARN_", "PIP_", "BUNDLE_", "CARGO_", "RUSTUP_", "CGO_", "CCACHE_", "DISTCC_",
		"OPENSSL_", "RSYNC_", "DOCKER_", "CLOUDSDK_", "ANSIBLE_", "TF_CLI_ARGS", "AWS_ENDPOINT_URL",
	}
)

// HookEnv says whether name is one of the variables that change what a
// command loads or runs, or how a program is configured: the names a glob
// of --allow-env never admits.
func HookEnv(name string) bool {
	up := strings.ToUpper(name)
	if slices.Contains(hookEnvNames, up) {
		return true
	}
	return slices.ContainsFunc(hookEnvPrefixes, func(p string) bool { return strings.HasPrefix(up, p) })
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

// Check answers nil when a payload may set name: a pattern is that very
// name, or, for a name HookEnv does not list, a glob matches it.
func (a EnvAllowlist) Check(name string) error {
	if strings.HasPrefix(name, reservedEnvPrefix) {
		return fmt.Errorf("env %s: RUNLEDGER_* variables are the worker's own", name)
	}
	if slices.Contains(a.patterns, name) {
		return nil
	}
	if HookEnv(name) {
		return fmt.Errorf("env %s changes what the command loads or runs or how a program is configured: a glob admits data variables only, so the worker admits it only when --allow-env names it exactly", name)
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
