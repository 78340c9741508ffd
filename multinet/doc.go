// Package multinet holds the multinet delegating plugin's end-to-end tests
// and benchmark (a real kube-apiserver, real namespaces, our delegate
// plugins). The plugin is in multinet/plugin, the binary in cmd/multinet;
// see README.md in this directory.
package multinet
