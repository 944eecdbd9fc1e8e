package host

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// ResolveCredential turns a job's user ("name", "uid", "name:group",
// "uid:gid"; names or numbers) into the credential the job runs with: the
// user's uid, the group (the user's primary group unless one is named) and
// the user's supplementary groups, as initgroups(3) would set them. "" means
// "as the agent" and returns nil. An unknown user or group is an error
// naming it.
func ResolveCredential(spec string) (*syscall.Credential, error) {
	if spec == "" {
		return nil, nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	u, err := lookupUser(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	gidText := u.Gid
	if hasGroup {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, err
		}
		gidText = g.Gid
	}
	gid, err := strconv.ParseUint(gidText, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q: %w", spec, gidText, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %q: supplementary groups: %w", name, err)
	}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %q: group id %q: %w", name, id, err)
		}
		cred.Groups = append(cred.Groups, uint32(g))
	}
	return cred, nil
}

func lookupUser(name string) (*user.User, error) {
	if _, err := strconv.ParseUint(name, 10, 32); err == nil {
		u, err := user.LookupId(name)
		if err != nil {
			return nil, fmt.Errorf("look up user id %s: %w", name, err)
		}
		return u, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up user %q: %w", name, err)
	}
	return u, nil
}

func lookupGroup(name string) (*user.Group, error) {
	if _, err := strconv.ParseUint(name, 10, 32); err == nil {
		g, err := user.LookupGroupId(name)
		if err != nil {
			return nil, fmt.Errorf("look up group id %s: %w", name, err)
		}
		return g, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return nil, fmt.Errorf("look up group %q: %w", name, err)
	}
	return g, nil
}
