module github.com/patchbay-cni/patchbay/test/multus

go 1.26.0

require gopkg.in/k8snetworkplumbingwg/multus-cni.v4 v4.3.0
