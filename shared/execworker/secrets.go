package execworker

import (
	"fmt"
	"os"

	"github.com/runledger/runledger/shared/protocol"
)

// SecretEnv names the variables of a worker's own environment that hold
// its credentials: the AWS SDK's keys and tokens, the local stack's API
// key, and a start environment's claim secrets. HideSecrets drops them.
var SecretEnv = []string{
	"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY",
	"AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
	"RUNLEDGER_API_KEY", protocol.EnvClaimNonce, protocol.EnvToken,
}

// HideSecrets keeps a worker's secrets from the commands it starts. Call
// it once the process has read them (its AWS configuration loaded, its
// Handler made: the base environment keeps what --pass-env names) and
// before the first command starts.
//
// It drops SecretEnv from the process's environment, so nothing started
// or read later finds them there. That alone does not close
// /proc/<pid>/environ, which shows the environment the process started
// with whatever it drops since, nor /proc/<pid>/mem, where the attempts'
// tokens live: on Linux the process also makes itself undumpable, so that
// a process of the same user (a command) can open neither. Root, or any
// process with CAP_SYS_PTRACE, still can; running commands as another
// user (Config.User) is the strong form.
func HideSecrets() error {
	for _, k := range SecretEnv {
		if err := os.Unsetenv(k); err != nil {
			return fmt.Errorf("hide secrets: unset %s: %w", k, err)
		}
	}
	if err := setUndumpable(); err != nil {
		return fmt.Errorf("hide secrets: %w", err)
	}
	return nil
}
