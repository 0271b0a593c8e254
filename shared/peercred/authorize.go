package peercred

import (
	"context"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Rule admits or refuses a caller. Its name is shown to refused callers.
type Rule struct {
	name  string
	allow func(AuthInfo) bool
}

func (r Rule) String() string { return r.name }

// Allows reports whether the rule admits the caller.
func (r Rule) Allows(c AuthInfo) bool { return r.allow != nil && r.allow(c) }

// Anyone admits every caller that can reach the socket.
func Anyone() Rule {
	return Rule{name: "anyone", allow: func(AuthInfo) bool { return true }}
}

// Root admits callers running as uid 0.
func Root() Rule {
	return Rule{name: "root", allow: func(c AuthInfo) bool { return c.UID == 0 }}
}

// UIDs admits callers running as one of the given users.
func UIDs(uids ...uint32) Rule {
	names := make([]string, len(uids))
	for i, u := range uids {
		names[i] = "uid " + strconv.FormatUint(uint64(u), 10)
	}
	return Rule{name: strings.Join(names, ", "), allow: func(c AuthInfo) bool {
		for _, u := range uids {
			if c.UID == u {
				return true
			}
		}
		return false
	}}
}

// Group admits members of a group: callers whose primary gid is gid or that have it among
// their supplementary groups, both as the kernel recorded them when the caller connected
// (never read from /proc, where a PID may by then be another process's).
func Group(name string, gid uint32) Rule {
	return Rule{name: "group " + name, allow: func(c AuthInfo) bool {
		return c.GID == gid || slices.Contains(c.Groups, gid)
	}}
}

// LookupGroup is Group for a group known by name. When the group does not exist, the rule
// admits nobody and says so.
func LookupGroup(name string) Rule {
	g, err := user.LookupGroup(name)
	if err != nil {
		return Rule{name: "group " + name + " (missing on this host)", allow: func(AuthInfo) bool { return false }}
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return Rule{name: "group " + name + " (gid " + g.Gid + " unusable)", allow: func(AuthInfo) bool { return false }}
	}
	return Group(name, uint32(gid))
}

// AnyOf admits a caller any of the rules admits.
func AnyOf(rules ...Rule) Rule {
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.name
	}
	return Rule{name: strings.Join(names, " or "), allow: func(c AuthInfo) bool {
		for _, r := range rules {
			if r.Allows(c) {
				return true
			}
		}
		return false
	}}
}

// Authorizer decides per RPC who may call. A rule is registered for a full method
// ("/unitlet.config.v1.ConfigService/GetConfig") or a whole service
// ("/unitlet.config.v1.ConfigService/"); everything else falls to the default rule.
type Authorizer struct {
	def   Rule
	rules map[string]Rule
}

// NewAuthorizer returns an authorizer whose unlisted methods admit def.
func NewAuthorizer(def Rule) *Authorizer {
	return &Authorizer{def: def, rules: map[string]Rule{}}
}

// Allow sets the rule for a full method name or a service prefix ending in "/".
func (a *Authorizer) Allow(method string, r Rule) { a.rules[method] = r }

// RuleFor returns the rule that governs method.
func (a *Authorizer) RuleFor(method string) Rule {
	if r, ok := a.rules[method]; ok {
		return r
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if r, ok := a.rules[method[:i+1]]; ok {
			return r
		}
	}
	return a.def
}

// Authorize returns a PermissionDenied status when the caller under ctx may not call method.
func (a *Authorizer) Authorize(ctx context.Context, method string) error {
	r := a.RuleFor(method)
	c, ok := FromContext(ctx)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s: the caller's credentials are unknown (not a Unix socket?); allowed: %s", method, r)
	}
	if !r.Allows(c) {
		return status.Errorf(codes.PermissionDenied, "%s: caller uid %d gid %d (pid %d) is not allowed; allowed: %s", method, c.UID, c.GID, c.PID, r)
	}
	return nil
}

// UnaryInterceptor authorizes unary calls.
func (a *Authorizer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.Authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor authorizes streaming calls.
func (a *Authorizer) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.Authorize(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}
