module github.com/patchbay-cni/patchbay

go 1.26.0

require (
	github.com/google/go-cmp v0.6.0
	github.com/google/nftables v0.3.0
	github.com/insomniacslk/dhcp v0.0.0-20240829085014-a3a4c1f04475
	github.com/mdlayher/netlink v1.7.3-0.20250113171957-fbb4dce95f42
	github.com/mdlayher/packet v1.1.2
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/net v0.33.0
	golang.org/x/sys v0.49.0
	sigs.k8s.io/yaml v1.4.0
)

require (
	github.com/josharian/native v1.1.0 // indirect
	github.com/mdlayher/socket v0.5.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.14 // indirect
	github.com/u-root/uio v0.0.0-20230220225925-ffce2a382923 // indirect
	golang.org/x/sync v0.6.0 // indirect
)
