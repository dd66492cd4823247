package execworker

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// LookupUser answers the credential commands run with for spec: a user
// name or a uid of the user database, whose primary and supplementary
// groups the commands get, or UID:GID, numeric, with no supplementary
// group.
func LookupUser(spec string) (*syscall.Credential, error) {
	if spec == "" {
		return nil, errors.New("user is empty: want a name, a uid or UID:GID")
	}
	if u, g, ok := strings.Cut(spec, ":"); ok {
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("user %q: want UID:GID, both numbers", spec)
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	u, err := user.Lookup(spec)
	if err != nil {
		if _, notNumber := strconv.ParseUint(spec, 10, 32); notNumber == nil {
			u, err = user.LookupId(spec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("user %q: %w (give UID:GID for a user the database does not hold)", spec, err)
	}
	return credentialOf(u)
}

// credentialOf is u's uid, primary gid and supplementary groups.
func credentialOf(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q is not a number", u.Username, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q is not a number", u.Username, u.Gid)
	}
	c := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %s: groups: %w", u.Username, err)
	}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %s: group id %q is not a number", u.Username, id)
		}
		c.Groups = append(c.Groups, uint32(g))
	}
	return c, nil
}
