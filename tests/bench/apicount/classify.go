// Package apicount counts the API requests of one client by verb and
// resource: a reverse proxy on loopback that the measured process talks to
// instead of the API server. The API server's own metrics cannot tell one
// client from the control plane's components; the proxy sees exactly the
// requests of the process under test.
package apicount

import (
	"net/http"
	"net/url"
	"strings"
)

// Key is one kind of request.
type Key struct {
	// Verb is the Kubernetes verb: get, list, watch, create, update,
	// patch, delete, deletecollection.
	Verb string
	// Resource is the plural resource, with "/subresource" if any;
	// "nonresource" for discovery, /version and the like.
	Resource string
}

// Write reports whether the verb changes state.
func (k Key) Write() bool {
	switch k.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Classify maps a request to its Key, as the API server's request info
// does for the paths client-go uses.
func Classify(method string, u *url.URL) Key {
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	var rest []string
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		rest = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		rest = segs[3:]
	default:
		return Key{Verb: strings.ToLower(method), Resource: "nonresource"}
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:] // namespaced: drop namespaces/<ns>
	}
	if len(rest) == 0 {
		return Key{Verb: strings.ToLower(method), Resource: "nonresource"}
	}
	resource, named := rest[0], len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	return Key{Verb: verb(method, named, u.Query()), Resource: resource}
}

func verb(method string, named bool, q url.Values) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			return "watch"
		case named:
			return "get"
		}
		return "list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(method)
}
