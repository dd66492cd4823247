//go:build linux

package execworker

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// setUndumpable clears the process's dumpable flag: its /proc/<pid>
// entries then belong to root, and a process of the same user can
// neither read its environ and mem nor attach to it. Commands are not
// affected: exec sets the flag again for the program it starts.
func setUndumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
