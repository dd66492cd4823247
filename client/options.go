package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"

	"github.com/runledger/runledger/shared/localinfo"
)

// Environment variables New reads when the options leave a choice open.
const (
	// EnvAPIURL is the API's base URL.
	EnvAPIURL = "RUNLEDGER_API_URL"
	// EnvAPIKey is the local stack's API key.
	EnvAPIKey = "RUNLEDGER_API_KEY"
	// EnvStack names the CloudFormation stack whose ApiUrl output is the
	// endpoint.
	EnvStack = "RUNLEDGER_STACK"
)

// Auth says how the client authenticates.
type Auth string

const (
	// AuthAPIKey sends "Authorization: Bearer <key>" (the local stack).
	AuthAPIKey Auth = "apikey"
	// AuthSigV4 signs every request with SigV4 for the service
	// "execute-api" (the deployed HTTP API's IAM authorization), with the
	// credentials of the AWS SDK's standard chain.
	AuthSigV4 Auth = "sigv4"
)

// Options configure New. Every field is optional.
//
// The endpoint is the first of: URL; the ApiUrl output of Stack; the
// RUNLEDGER_API_URL environment variable; the ApiUrl output of the stack
// RUNLEDGER_STACK names; the api_url of the local stack's file
// (.runledger/local.json, written by `make run`, looked for in the working
// directory and its parents, or at LocalInfo).
//
// The authentication is Auth when set. Otherwise an API key (APIKey, else
// RUNLEDGER_API_KEY, else the local file's api_key when the endpoint is
// that file's api_url) means AuthAPIKey, and no key means AuthSigV4.
type Options struct {
	URL    string
	APIKey string
	Auth   Auth
	// Stack is the name of the CDK stack (CloudFormation) whose outputs
	// give the endpoint (ApiUrl) and the signing region (Region).
	Stack string
	// LocalInfo is the path of the local stack's file; empty: found from
	// the working directory.
	LocalInfo string
	// Region is the SigV4 signing region; empty: the stack's Region
	// output, else the AWS configuration's region.
	Region string
	// AWSConfig is used for SigV4 and CloudFormation; nil: loaded with
	// config.LoadDefaultConfig when needed.
	AWSConfig *aws.Config
	// HTTPClient sends the requests; nil: a client with a 60 s timeout.
	HTTPClient *http.Client
	// Insecure allows sending the API key over plain http to a host other
	// than the loopback (127.0.0.1, ::1, localhost), where anyone on the
	// path reads it. Without it New refuses that endpoint; https and the
	// loopback need no option.
	Insecure bool
}

// New builds a client, finding the endpoint and the credentials as Options
// says. It calls AWS only for a stack's outputs and SigV4 credentials.
func New(ctx context.Context, o Options) (*Client, error) {
	r := resolver{o: o}
	base, err := r.endpoint(ctx)
	if err != nil {
		return nil, err
	}
	auth, err := r.authenticator(ctx, base)
	if err != nil {
		return nil, err
	}
	if _, isKey := auth.(bearer); isKey && !o.Insecure && !keySafeAt(base) {
		return nil, fmt.Errorf("client: refusing to send the API key over plain http to %s, where anyone on the path can read it: "+
			"use https, or allow it explicitly (Options.Insecure, the CLI's --insecure)", base)
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	_, isKey := auth.(bearer)
	return &Client{base: base, http: guardRedirects(hc, isKey && !o.Insecure), auth: auth}, nil
}

// maxRedirects is how many redirects one call follows, as net/http's
// default policy does.
const maxRedirects = 10

// guardRedirects is a copy of hc (the caller's stays as it was) whose
// redirects keep the credentials where New allowed them. net/http keeps
// the Authorization header on a redirect to the same host or one of its
// subdomains, over plain http too: a 307 from https to http would hand
// the key to anyone on the path.
func guardRedirects(hc *http.Client, keyNeedsSafety bool) *http.Client {
	c := *hc
	next := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := redirectRefusal(via[0].URL, req.URL, keyNeedsSafety); err != nil {
			return err
		}
		if !sameHost(via[0].URL, req.URL) {
			req.Header.Del("Authorization")
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		return nil
	}
	return &c
}

// redirectRefusal is why a redirect from the call's first URL to to may
// not be followed, or nil: with an API key to keep safe, the redirect may
// go only where New would have sent the key (keySafeAt).
func redirectRefusal(from, to *url.URL, keyNeedsSafety bool) error {
	if keyNeedsSafety && !keySafeAt(to.String()) {
		return fmt.Errorf("client: refusing to follow a redirect from %s to plain http at %s, where anyone on the path can read the API key",
			from.Redacted(), to.Redacted())
	}
	return nil
}

// sameHost reports whether two URLs name one host and port; the
// credentials of one are never sent to another.
func sameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Host, b.Host)
}

// resolver decides the endpoint and the authentication, and remembers what
// it read on the way (the local file, the stack's region, the AWS config).
type resolver struct {
	o         Options
	local     *localinfo.Info
	stackRgn  string
	awsConfig *aws.Config
}

func (r *resolver) endpoint(ctx context.Context) (string, error) {
	switch {
	case r.o.URL != "":
		return trimBase(r.o.URL)
	case r.o.Stack != "":
		return r.stackURL(ctx, r.o.Stack)
	case os.Getenv(EnvAPIURL) != "":
		return trimBase(os.Getenv(EnvAPIURL))
	case os.Getenv(EnvStack) != "":
		return r.stackURL(ctx, os.Getenv(EnvStack))
	}
	info, path, err := r.localInfo()
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("client: no endpoint: set Options.URL or Options.Stack, %s or %s, or start the local stack (make run writes %s)",
			EnvAPIURL, EnvStack, localinfo.DefaultPath)
	}
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	if info.APIURL == "" {
		return "", fmt.Errorf("client: %s has no api_url", path)
	}
	return trimBase(info.APIURL)
}

// localInfo reads the local stack's file once; fs.ErrNotExist when there
// is none.
func (r *resolver) localInfo() (*localinfo.Info, string, error) {
	path := r.o.LocalInfo
	if path == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, "", err
		}
		if path, err = localinfo.Find(wd); err != nil {
			return nil, "", err
		}
	}
	if r.local != nil {
		return r.local, path, nil
	}
	info, err := localinfo.Read(path)
	if err != nil {
		return nil, path, err
	}
	r.local = &info
	return r.local, path, nil
}

// keySafeAt reports whether a bearer key may go to base without an
// explicit Insecure: over https, or over http to the loopback only.
func keySafeAt(base string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	if u.Scheme == "https" {
		return true
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func trimBase(u string) (string, error) {
	u = strings.TrimRight(strings.TrimSpace(u), "/")
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return "", fmt.Errorf("client: the endpoint %q is not an http(s) URL", u)
	}
	return u, nil
}

func (r *resolver) aws(ctx context.Context) (aws.Config, error) {
	if r.awsConfig != nil {
		return *r.awsConfig, nil
	}
	if r.o.AWSConfig != nil {
		r.awsConfig = r.o.AWSConfig
		return *r.awsConfig, nil
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("client: load the AWS configuration: %w", err)
	}
	r.awsConfig = &cfg
	return cfg, nil
}

// Names of the CDK stack's outputs the client reads (infra/main.go).
const (
	outputAPIURL = "ApiUrl"
	outputRegion = "Region"
)

// stackURL reads the stack's ApiUrl (and Region) outputs with
// CloudFormation DescribeStacks.
func (r *resolver) stackURL(ctx context.Context, stack string) (string, error) {
	cfg, err := r.aws(ctx)
	if err != nil {
		return "", err
	}
	out, err := cloudformation.NewFromConfig(cfg).DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(stack)})
	if err != nil {
		return "", fmt.Errorf("client: describe stack %s: %w", stack, err)
	}
	if len(out.Stacks) == 0 {
		return "", fmt.Errorf("client: describe stack %s: no such stack", stack)
	}
	var api string
	for _, o := range out.Stacks[0].Outputs {
		switch aws.ToString(o.OutputKey) {
		case outputAPIURL:
			api = aws.ToString(o.OutputValue)
		case outputRegion:
			r.stackRgn = aws.ToString(o.OutputValue)
		}
	}
	if api == "" {
		return "", fmt.Errorf("client: stack %s has no %s output", stack, outputAPIURL)
	}
	return trimBase(api)
}

func (r *resolver) authenticator(ctx context.Context, base string) (authenticator, error) {
	auth, key := r.o.Auth, r.o.APIKey
	if key == "" {
		key = os.Getenv(EnvAPIKey)
	}
	if key == "" && auth != AuthSigV4 {
		if info, _, err := r.localInfo(); err == nil && strings.TrimRight(info.APIURL, "/") == base {
			key = info.APIKey
		}
	}
	if auth == "" {
		auth = AuthSigV4
		if key != "" {
			auth = AuthAPIKey
		}
	}
	switch auth {
	case AuthAPIKey:
		if key == "" {
			return nil, fmt.Errorf("client: API key authentication needs a key: set Options.APIKey or %s", EnvAPIKey)
		}
		return bearer(key), nil
	case AuthSigV4:
		cfg, err := r.aws(ctx)
		if err != nil {
			return nil, err
		}
		region := r.o.Region
		if region == "" {
			region = r.stackRgn
		}
		if region == "" {
			region = cfg.Region
		}
		if region == "" {
			return nil, errors.New("client: SigV4 needs a region: set Options.Region or AWS_REGION")
		}
		if cfg.Credentials == nil {
			return nil, errors.New("client: SigV4 needs AWS credentials; none are configured")
		}
		return newSigner(cfg.Credentials, region), nil
	}
	return nil, fmt.Errorf("client: unknown Auth %q (want %q or %q)", auth, AuthAPIKey, AuthSigV4)
}
