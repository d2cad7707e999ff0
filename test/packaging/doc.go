// Package packaging tests what operators install: the Debian package `make deb` writes
// (built twice to compare bytes, linted, then installed, upgraded, removed and purged with
// dpkg in a directory of its own, never in the machine's root) and the example Prometheus
// alerting rules (promtool check rules, promtool test rules). Root is needed for dpkg;
// lintian and promtool are installed from Debian's packages when missing.
package packaging
