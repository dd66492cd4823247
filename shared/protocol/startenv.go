package protocol

import (
	"fmt"
	"strconv"
)

// The environment of a process that an executor starts with only the
// attempt's name and token (the ecs executor's container): ECS overrides
// hold at most 8 KiB, so the process claims the attempt to get its
// envelope (payload, params, timeouts) from the claim answer.
const (
	EnvRun     = "RUNLEDGER_RUN"
	EnvTask    = "RUNLEDGER_TASK"
	EnvAttempt = "RUNLEDGER_ATTEMPT"
	// EnvToken is the attempt's fencing token, the bearer of the worker
	// routes. Whoever may read the process's environment (for ECS: every
	// principal allowed ecs:DescribeTasks) may act as the attempt.
	EnvToken  = "RUNLEDGER_TOKEN"
	EnvAPIURL = "RUNLEDGER_API_URL"
)

// StartVar is one variable of a start environment.
type StartVar struct{ Name, Value string }

// StartEnv is the environment that names attempt ref to a process started
// for it, in a fixed order.
func StartEnv(ref AttemptRef, token, apiURL string) []StartVar {
	return []StartVar{
		{EnvRun, ref.Run},
		{EnvTask, ref.Task},
		{EnvAttempt, strconv.Itoa(ref.Attempt)},
		{EnvToken, token},
		{EnvAPIURL, apiURL},
	}
}

// ParseStartEnv reads a start environment through getenv (os.Getenv). A
// missing or malformed variable is an error naming it.
func ParseStartEnv(getenv func(string) string) (ref AttemptRef, token, apiURL string, err error) {
	for _, name := range []string{EnvRun, EnvTask, EnvAttempt, EnvToken, EnvAPIURL} {
		if getenv(name) == "" {
			return AttemptRef{}, "", "", fmt.Errorf("start environment: %s is not set", name)
		}
	}
	n, err := strconv.Atoi(getenv(EnvAttempt))
	if err != nil || n < 1 {
		return AttemptRef{}, "", "", fmt.Errorf("start environment: %s %q is not an attempt number", EnvAttempt, getenv(EnvAttempt))
	}
	ref = AttemptRef{Run: getenv(EnvRun), Task: getenv(EnvTask), Attempt: n}
	return ref, getenv(EnvToken), getenv(EnvAPIURL), nil
}
