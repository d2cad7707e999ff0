// Package allowlist decides which images debug containers may run on the
// node (--debug-image-allowlist, --debug-image-allowlist-file): patterns of
// registry and repository with * wildcards, an optional tag or a pinned
// digest, matched against the names an image is known by.
package allowlist
