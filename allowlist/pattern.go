package allowlist

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// Pattern is one allowlist entry: a repository pattern, and optionally a tag
// pattern or one pinned digest.
type Pattern struct {
	raw    string
	name   *regexp.Regexp
	tag    *regexp.Regexp // nil: any tag
	digest digest.Digest  // empty: any digest
}

// namePattern is what a repository pattern may hold: the characters of a
// normalized image name, a registry port, and wildcards.
var namePattern = regexp.MustCompile(`^[a-z0-9._/:*-]+$`)

// tagPattern is a tag (128 characters of [\w.-]) with wildcards.
var tagPattern = regexp.MustCompile(`^[\w.*-]{1,128}$`)

// ParsePattern reads one entry. The repository part is normalized as image
// names are (busybox is docker.io/library/busybox), so that an entry means
// what the same text means in a pod spec. In it, * matches within one path
// component and ** across components.
func ParsePattern(s string) (Pattern, error) {
	p := Pattern{raw: s}
	name := s
	if i := strings.IndexByte(name, '@'); i >= 0 {
		d, err := digest.Parse(name[i+1:])
		if err != nil {
			return p, fmt.Errorf("pattern %q: digest: %w", s, err)
		}
		p.digest, name = d, name[:i]
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		if p.digest != "" {
			return p, fmt.Errorf("pattern %q: a tag and a digest: pin the digest alone", s)
		}
		tag := name[i+1:]
		if !tagPattern.MatchString(tag) {
			return p, fmt.Errorf("pattern %q: tag %q: want letters, digits, '_', '.', '-' and '*'", s, tag)
		}
		p.tag, name = wildcard(tag, false), name[:i]
	}
	if name == "" || !namePattern.MatchString(name) || strings.Contains(name, "//") || strings.HasSuffix(name, "/") {
		return p, fmt.Errorf("pattern %q: repository %q: want lowercase registry/repository path, with * or ** wildcards", s, name)
	}
	p.name = wildcard(normalize(name), true)
	return p, nil
}

// String is the entry as written.
func (p Pattern) String() string { return p.raw }

// normalize applies the Docker Hub defaults of reference.ParseNormalizedNamed
// to a repository pattern, which may not parse as a name.
func normalize(name string) string {
	first, _, found := strings.Cut(name, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return name
	}
	if !found {
		return "docker.io/library/" + name
	}
	return "docker.io/" + name
}

// wildcard compiles a glob: * stops at '/' in repository patterns, ** does not.
func wildcard(glob string, path bool) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		switch {
		case glob[i] != '*':
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		case path && i+1 < len(glob) && glob[i+1] == '*':
			b.WriteString(".*")
			i++
		case path:
			b.WriteString("[^/]*")
		default:
			b.WriteString(".*")
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// Match reports whether the image name ref matches. A digest entry matches
// only a name carrying that digest: a tag, whatever it points at today, is
// not pinned.
func (p Pattern) Match(ref reference.Named) bool {
	if !p.name.MatchString(ref.Name()) {
		return false
	}
	if p.digest != "" {
		c, ok := ref.(reference.Canonical)
		return ok && c.Digest() == p.digest
	}
	if p.tag != nil {
		t, ok := ref.(reference.Tagged)
		return ok && p.tag.MatchString(t.Tag())
	}
	return true
}

// imageID is an image ID without its algorithm, as some runtimes answer.
var imageID = regexp.MustCompile(`^[a-f0-9]{64}$`)

// ParseName reads an image name as a pod spec or the runtime writes it. An
// image ID (sha256:..., or 64 hex digits) names no repository: ok is false.
func ParseName(s string) (ref reference.Named, ok bool) {
	if _, err := digest.Parse(s); err == nil || imageID.MatchString(s) {
		return nil, false
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return nil, false
	}
	return reference.TagNameOnly(named), true
}
