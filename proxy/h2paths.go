package proxy

// pathInfo is everything the relay decides from a call's :path: where it
// goes, whether it is refused, how its answer is rewritten and where it is
// counted.
type pathInfo struct {
	route      route
	refused    string      // non-empty: answered Unimplemented with this message
	localIf    func() bool // non-nil: routeLocal instead of route while it holds
	rewrite    Rewrite
	notFoundOK func(string)
	observe    MethodObserver // nil: not counted here (crishim's gRPC server counts it)
	// other is how the calls of callers other than the kubelet go: pi
	// itself, or counted apart, or sent to crishim's gRPC server to be
	// audited (ServerOptions.Audited).
	other *pathInfo
}

// auditedInfo is a call sent to crishim's gRPC server to be audited: it
// relays the call (amending answers as the relay does) and counts it.
var auditedInfo = &pathInfo{route: routeLocal}

// paths answers pathInfo for a :path. The methods crishim knows (the CRI
// and its own services) are worked out once, at start, so that a call
// costs one map lookup; any other path is worked out per call, and not
// kept, as clients choose it.
type paths struct {
	known   map[string]*pathInfo
	router  *router
	observe CallObserver
	audited func(string) bool
}

func newPaths(rt *router, observe CallObserver, audited func(string) bool, known []string) paths {
	p := paths{known: make(map[string]*pathInfo, len(known)), router: rt, observe: observe, audited: audited}
	for _, path := range known {
		p.known[path] = p.work(path)
	}
	return p
}

func (p *paths) lookup(path string) *pathInfo {
	if pi := p.known[path]; pi != nil {
		return pi
	}
	return p.work(path)
}

func (p *paths) work(path string) *pathInfo {
	pi := p.kubelet(path)
	pi.other = pi
	switch others, _ := p.observe.(OtherCallers); {
	case pi.refused != "" || pi.route == routeLocal:
	case p.audited != nil && p.audited(path):
		pi.other = auditedInfo
	case others != nil:
		o := *pi
		o.observe = others.OtherMethod(path)
		o.other = &o
		pi.other = &o
	}
	return pi
}

// kubelet is how the kubelet's calls to path go.
func (p *paths) kubelet(path string) *pathInfo {
	pi := &pathInfo{refused: refusedMethod(path)}
	if pi.refused != "" {
		return pi
	}
	pi.route = p.router.route(path)
	if pi.route == routeLocal {
		return pi
	}
	pi.localIf = p.router.localIf[path]
	pi.rewrite = p.router.rewrites[path]
	pi.notFoundOK = p.router.notFoundOK[path]
	if p.observe != nil {
		pi.observe = p.observe.Method(path)
	}
	return pi
}
