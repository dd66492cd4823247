package emulator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
)

func TestModuleOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, gomod, want string
	}{
		{"plain", "module github.com/runledger/runledger\n\ngo 1.26\n", ModulePath},
		{"quoted with comment", "// x\nmodule \"github.com/runledger/runledger\" // root\n", ModulePath},
		{"other module", "module github.com/runledger/runledger/infra\n", "github.com/runledger/runledger/infra"},
		{"modulex is not module", "modulex foo\n", ""},
		{"none", "go 1.26\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := moduleOf([]byte(tt.gomod)); got != tt.want {
				t.Errorf("moduleOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFindRootSkipsNestedModule(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	nested := filepath.Join(root, "infra", "deep")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "go.mod"), "module "+ModulePath+"\n")
	write(t, filepath.Join(root, "infra", "go.mod"), "module "+ModulePath+"/infra\n")
	got, err := FindRoot(nested)
	if err != nil || got != root {
		t.Fatalf("FindRoot = %q, %v; want %q", got, err, root)
	}
	if _, err := FindRoot(t.TempDir()); err == nil {
		t.Fatal("FindRoot outside the repository: want an error")
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestConfiguredEndpoint(t *testing.T) {
	keys := []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_PROFILE"}
	const profileFile = "[default]\nendpoint_url = http://file-global\nservices = local\n\n" +
		"[services local]\ndynamodb =\n  endpoint_url = http://file-dynamodb\n"
	tests := []struct {
		name         string
		env          map[string]string
		file         string
		wantDynamoDB string
		wantSQS      string
	}{
		{name: "nothing configured"},
		{name: "global", env: map[string]string{"AWS_ENDPOINT_URL": "http://global"},
			wantDynamoDB: "http://global", wantSQS: "http://global"},
		{name: "sqs only", env: map[string]string{"AWS_ENDPOINT_URL_SQS": "http://sqs"},
			wantSQS: "http://sqs"},
		{name: "service beats global", env: map[string]string{"AWS_ENDPOINT_URL": "http://global", "AWS_ENDPOINT_URL_DYNAMODB": "http://ddb"},
			wantDynamoDB: "http://ddb", wantSQS: "http://global"},
		{name: "ignored", env: map[string]string{"AWS_ENDPOINT_URL": "http://global", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}},
		{name: "shared config file", file: profileFile,
			wantDynamoDB: "http://file-dynamodb", wantSQS: "http://file-global"},
		{name: "global env beats file service entry", file: profileFile, env: map[string]string{"AWS_ENDPOINT_URL": "http://global"},
			wantDynamoDB: "http://global", wantSQS: "http://global"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range keys {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			file := filepath.Join(t.TempDir(), "config")
			write(t, file, tt.file)
			t.Setenv("AWS_CONFIG_FILE", file)
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", file)
			cfg, err := config.LoadDefaultConfig(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ddb, _ := configuredEndpoint(t.Context(), cfg, "DynamoDB")
			sqs, _ := configuredEndpoint(t.Context(), cfg, "SQS")
			if ddb != tt.wantDynamoDB || sqs != tt.wantSQS {
				t.Errorf("dynamodb, sqs = %q, %q; want %q, %q", ddb, sqs, tt.wantDynamoDB, tt.wantSQS)
			}
		})
	}
}

// A server that dies before it is ready yields an error carrying its output.
func TestWaitReadyReportsEarlyExit(t *testing.T) {
	t.Parallel()
	sp := newSpawner()
	defer sp.close()
	p, err := sp.spawn("doomed", t.TempDir(), "/bin/sh", []string{"-c", "echo 'cannot open the database' >&2; exit 3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	err = waitReady(t.Context(), p, 1, "http://127.0.0.1:1", serverSpec{service: "doomed",
		portTaken: func(string) bool { return false },
		readyLine: func(int) string { return "never printed" },
		health:    func(context.Context, string) error { return nil }})
	if err == nil || !strings.Contains(err.Error(), "cannot open the database") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want the exit status and the server's output", err)
	}
}

// A server that never listens times out, and startServer kills it.
func TestStartServerTimeoutKillsServer(t *testing.T) {
	t.Parallel()
	env := &Env{log: slog.New(slog.DiscardHandler), spawner: newSpawner()}
	defer env.Stop()
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, _, err := env.startServer(t.Context(), serverSpec{
		service: "silent",
		dir:     t.TempDir(),
		bin:     "/bin/sh",
		args: func(int) []string {
			return []string{"-c", "echo $$ > " + pidFile + "; echo still warming up; exec sleep 600"}
		},
		portTaken: func(string) bool { return false },
		readyLine: func(int) string { return "never printed" },
		health:    func(context.Context, string) error { return nil },
	}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "still warming up") {
		t.Fatalf("err = %v, want a timeout carrying the output", err)
	}
	data, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &pid); err != nil {
		t.Fatal(err)
	}
	if Alive(pid) {
		t.Errorf("server pid %d still alive after a failed start", pid)
	}
}

// When another process holds the chosen port, each server notices it is
// not the listener, gives up that port and starts on another one, instead
// of health-checking the stranger.
func TestStartRetriesTakenPort(t *testing.T) {
	isolateInternal(t)
	stranger, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	taken := stranger.Addr().(*net.TCPAddr).Port

	real := freePort
	var handedOut atomic.Int32
	freePort = func() (int, error) {
		if handedOut.Add(1) <= 2 { // the first choice of each server
			return taken, nil
		}
		return real()
	}
	t.Cleanup(func() { freePort = real })

	env, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	for _, ep := range []Endpoint{env.DynamoDB(), env.SQS()} {
		if !ep.Started || strings.HasSuffix(ep.URL, ":"+strconv.Itoa(taken)) {
			t.Errorf("%s endpoint = %+v, want a started emulator off the taken port %d", ep.Service, ep, taken)
		}
	}
	if n := handedOut.Load(); n < 4 {
		t.Errorf("ports handed out = %d, want at least 4 (one retry per server)", n)
	}
	if _, err := env.DynamoDBClient().ListTables(t.Context(), nil); err != nil {
		t.Errorf("dynamodb after retry: %v", err)
	}
	if _, err := env.SQSClient().ListQueues(t.Context(), nil); err != nil {
		t.Errorf("sqs after retry: %v", err)
	}
}

// The DynamoDB Local launcher is compiled once per source: concurrent first
// uses (test packages starting at once) agree on one folder holding the
// class, and a later use compiles nothing.
func TestDynamoLauncherCompiledOnce(t *testing.T) {
	t.Parallel()
	java, err := javaBinary()
	if err != nil {
		t.Skip(err)
	}
	l := layout{launcherDir: t.TempDir()}
	dirs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Go(func() { dirs[i], errs[i] = l.dynamoLauncher(t.Context(), java) })
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("use %d: %q, %v; want %q", i, dirs[i], errs[i], dirs[0])
		}
	}
	class := filepath.Join(dirs[0], dynamoLauncherClass+".class")
	before, err := os.Stat(class)
	if err != nil {
		t.Fatal(err)
	}
	again, err := l.dynamoLauncher(t.Context(), java)
	if err != nil || again != dirs[0] {
		t.Fatalf("a later use: %q, %v", again, err)
	}
	if after, err := os.Stat(class); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the class was written again (%v)", err)
	}
	left, err := os.ReadDir(l.launcherDir)
	if err != nil || len(left) != 1 {
		t.Errorf("launcher folder holds %v (%v), want only the compiled one", left, err)
	}
}
