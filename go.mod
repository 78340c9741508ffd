module github.com/patchbay-cni/patchbay

go 1.26.0

require (
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.49.0
)

require github.com/vishvananda/netns v0.0.5 // indirect
