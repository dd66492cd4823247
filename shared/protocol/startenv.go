package protocol

import (
	"fmt"
	"strconv"
)

// The environment of a process that an executor starts with only the
// attempt's name and a credential to claim it (the ecs executor's
// container): ECS overrides hold at most 8 KiB, so the process claims the
// attempt to get its envelope (payload, params, timeouts, token) from the
// claim answer.
const (
	EnvRun     = "RUNLEDGER_RUN"
	EnvTask    = "RUNLEDGER_TASK"
	EnvAttempt = "RUNLEDGER_ATTEMPT"
	// EnvClaimNonce is the attempt's one-time claim nonce: a bearer the
	// claim route accepts while the attempt is not claimed yet, and whose
	// answer carries the attempt's token to the claimer only. It is
	// worth nothing after the claim, so whoever may read the process's
	// environment (for ECS: every principal allowed ecs:DescribeTasks,
	// and CloudTrail's record of RunTask) cannot act as the attempt once
	// the process has claimed it.
	EnvClaimNonce = "RUNLEDGER_CLAIM_NONCE"
	// EnvToken is the attempt's token itself, in the start environment of
	// an attempt that has no claim nonce only (its run was created before
	// attempts had one): whoever reads the environment may act as that
	// attempt until it ends.
	EnvToken  = "RUNLEDGER_TOKEN"
	EnvAPIURL = "RUNLEDGER_API_URL"
)

// StartVar is one variable of a start environment.
type StartVar struct{ Name, Value string }

// ClaimCredential is what a started process claims its attempt with:
// the attempt's claim nonce, or, for an attempt without one, its token.
// Exactly one is set.
type ClaimCredential struct {
	Nonce string
	Token string
}

// StartEnv is the environment that names attempt ref to a process started
// for it, in a fixed order: the claim nonce when cred has one, else the
// token.
func StartEnv(ref AttemptRef, cred ClaimCredential, apiURL string) []StartVar {
	secret := StartVar{EnvClaimNonce, cred.Nonce}
	if cred.Nonce == "" {
		secret = StartVar{EnvToken, cred.Token}
	}
	return []StartVar{
		{EnvRun, ref.Run},
		{EnvTask, ref.Task},
		{EnvAttempt, strconv.Itoa(ref.Attempt)},
		secret,
		{EnvAPIURL, apiURL},
	}
}

// ParseStartEnv reads a start environment through getenv (os.Getenv). A
// missing or malformed variable is an error naming it.
func ParseStartEnv(getenv func(string) string) (ref AttemptRef, cred ClaimCredential, apiURL string, err error) {
	for _, name := range []string{EnvRun, EnvTask, EnvAttempt, EnvAPIURL} {
		if getenv(name) == "" {
			return AttemptRef{}, ClaimCredential{}, "", fmt.Errorf("start environment: %s is not set", name)
		}
	}
	cred = ClaimCredential{Nonce: getenv(EnvClaimNonce)}
	if cred.Nonce == "" {
		cred.Token = getenv(EnvToken)
	}
	if cred.Nonce == "" && cred.Token == "" {
		return AttemptRef{}, ClaimCredential{}, "", fmt.Errorf("start environment: %s is not set", EnvClaimNonce)
	}
	n, err := strconv.Atoi(getenv(EnvAttempt))
	if err != nil || n < 1 {
		return AttemptRef{}, ClaimCredential{}, "", fmt.Errorf("start environment: %s %q is not an attempt number", EnvAttempt, getenv(EnvAttempt))
	}
	ref = AttemptRef{Run: getenv(EnvRun), Task: getenv(EnvTask), Attempt: n}
	return ref, cred, getenv(EnvAPIURL), nil
}
