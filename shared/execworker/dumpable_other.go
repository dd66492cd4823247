//go:build !linux

package execworker

// setUndumpable does nothing here: only Linux has the dumpable flag. On
// other systems a command of the worker's own user may read the worker's
// environment; run commands as another user (Config.User) to prevent it.
func setUndumpable() error { return nil }
