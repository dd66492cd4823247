package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// authenticator puts the credentials on a request; body is the request's
// body (nil: none), which SigV4 hashes.
type authenticator interface {
	authorize(ctx context.Context, req *http.Request, body []byte) error
}

// bearer is the local stack's API key.
type bearer string

func (b bearer) authorize(_ context.Context, req *http.Request, _ []byte) error {
	req.Header.Set("Authorization", "Bearer "+string(b))
	return nil
}

// signingService is the service name API Gateway's IAM authorization
// checks signatures for.
const signingService = "execute-api"

// sigv4 signs requests for the deployed HTTP API. The credentials provider
// is the AWS configuration's (a cache in front of the standard chain), so
// temporary credentials are renewed as they expire.
type sigv4 struct {
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
	now    func() time.Time
}

func newSigner(creds aws.CredentialsProvider, region string) *sigv4 {
	return &sigv4{creds: creds, region: region, signer: v4.NewSigner(), now: time.Now}
}

func (s *sigv4) authorize(ctx context.Context, req *http.Request, body []byte) error {
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("retrieve AWS credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), signingService, s.region, s.now()); err != nil {
		return fmt.Errorf("sign the request: %w", err)
	}
	return nil
}
