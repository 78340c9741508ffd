package clusteripam

import (
	"encoding/json"
	"io/fs"
	"math/big"
	"net/netip"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// files is a fake file system for flat files.
type files map[string]string

func (f files) read(p string) ([]byte, error) {
	if s, ok := f[p]; ok {
		return []byte(s), nil
	}
	return nil, fs.ErrNotExist
}

func conf(ipam string) []byte {
	return []byte(`{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":` + ipam + `}`)
}

func mustParse(t *testing.T, ipam, args string, f files) *Config {
	t.Helper()
	c, err := ParseConfig(conf(ipam), args, f.read)
	if err != nil {
		t.Fatalf("ParseConfig(%s): %v", ipam, err)
	}
	return c
}

func TestParseWhereaboutsKeys(t *testing.T) {
	c := mustParse(t, `{"type":"cluster-ipam","range":"192.168.2.225/28","exclude":["192.168.2.229/30","192.168.2.236/32"],
		"gateway":"192.168.2.225","network_name":"blue","routes":[{"dst":"10.0.0.0/8","gw":"192.168.2.225"}],
		"dns":{"nameservers":["1.1.1.1"]},"kubernetes":{"kubeconfig":"/k"},"log_file":"/tmp/x","log_level":"verbose",
		"ipRanges":[{"range":"fd00::10-fd00::1f/64","exclude":["fd00::12"]}],"leader_lease_duration":1500,"node_slice_size":"/28"}`, "", nil)
	if c.Network != "net1" || c.NetworkName != "blue" || !c.Overlapping || c.Kubeconfig != "/k" || c.LogFile != "/tmp/x" || c.LogLevel != "verbose" {
		t.Errorf("config %+v", c)
	}
	if len(c.Ranges) != 2 {
		t.Fatalf("ranges %v", c.Ranges)
	}
	r := c.Ranges[0]
	if r.Prefix.String() != "192.168.2.224/28" || r.Start.String() != "192.168.2.225" || r.End.String() != "192.168.2.238" || r.Gateway.String() != "192.168.2.225" || r.Field != "ipam" {
		t.Errorf("range 0 = %+v", r)
	}
	// 14 usable, minus .228-.231 (4), .236, and the gateway .225: 8.
	if r.UsableCount().Cmp(big.NewInt(8)) != 0 {
		t.Errorf("usable = %v, want 8", r.UsableCount())
	}
	for a, want := range map[string]bool{"192.168.2.225": false, "192.168.2.226": true, "192.168.2.229": false, "192.168.2.236": false, "192.168.2.237": true, "192.168.2.239": false} {
		if got := r.Usable(netip.MustParseAddr(a)); got != want {
			t.Errorf("Usable(%s) = %v, want %v", a, got, want)
		}
	}
	r6 := c.Ranges[1]
	if r6.Start.String() != "fd00::10" || r6.End.String() != "fd00::1f" || r6.Prefix.String() != "fd00::/64" || r6.Gateway.IsValid() || r6.Field != "ipam.ipRanges[0]" {
		t.Errorf("range 1 = %+v", r6)
	}
	if r6.UsableCount().Cmp(big.NewInt(15)) != 0 {
		t.Errorf("usable6 = %v", r6.UsableCount())
	}
	if len(c.Routes) != 1 || c.Routes[0].GW.String() != "192.168.2.225" || c.DNS.Nameservers[0] != "1.1.1.1" {
		t.Errorf("routes %v dns %v", c.Routes, c.DNS)
	}
}

func TestParseDefaultsAndPrefixes(t *testing.T) {
	c := mustParse(t, `{"type":"cluster-ipam","range":"10.9.8.7/24","range_start":"10.9.8.100","enable_overlapping_ranges":false}`, "", nil)
	r := c.Ranges[0]
	if r.Prefix.String() != "10.9.8.0/24" || r.Start.String() != "10.9.8.100" || r.End.String() != "10.9.8.254" || c.Overlapping {
		t.Errorf("%+v overlapping %v", r, c.Overlapping)
	}
	// /31 and /32 hand out every address (point-to-point links).
	c = mustParse(t, `{"range":"10.0.0.0/31"}`, "", nil)
	if c.Ranges[0].Start.String() != "10.0.0.0" || c.Ranges[0].End.String() != "10.0.0.1" {
		t.Errorf("/31: %+v", c.Ranges[0])
	}
	c = mustParse(t, `{"range":"2001:db8::5/128"}`, "", nil)
	if c.Ranges[0].UsableCount().Int64() != 1 {
		t.Errorf("/128: %+v", c.Ranges[0])
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ ipam, args, want string }{
		{`null`, "", `missing required key "ipam"`},
		{`[]`, "", `ipam is not a JSON object`},
		{`{}`, "", `no address range`},
		{`{"range":"10.0.0.0"}`, "", `ipam.range "10.0.0.0" is not a CIDR`},
		{`{"range":"10.0.0.0/33"}`, "", `ipam.range "10.0.0.0/33" is not a CIDR`},
		{`{"range":"x-10.0.0.5/24"}`, "", `"x" before the dash is not an IP address`},
		{`{"range":"10.0.1.5-10.0.0.9/24"}`, "", `10.0.1.5 is not a usable address of 10.0.0.0/24`},
		{`{"range":"10.0.0.9-10.0.0.5/24"}`, "", `range_end 10.0.0.5 is before range_start 10.0.0.9`},
		{`{"range":"10.0.0.5-10.0.0.9/24","range_start":"10.0.0.6"}`, "", `range_start and range_end must not be set too`},
		{`{"range":"10.0.0.0/24","range_start":"10.0.1.1"}`, "", `ipam.range_start 10.0.1.1 is not a usable address of range 10.0.0.0/24 (10.0.0.1-10.0.0.254)`},
		{`{"range":"10.0.0.0/24","range_end":"nope"}`, "", `ipam.range_end "nope" is not an IP address`},
		{`{"range":"10.0.0.0/24","exclude":["10.0.0.0/33"]}`, "", `ipam.exclude[0] "10.0.0.0/33" is not a CIDR or an IP address`},
		{`{"range":"10.0.0.0/30","exclude":["10.0.0.0/30"]}`, "", `no address left to hand out in 10.0.0.0/30`},
		{`{"range":"10.0.0.0/24","gateway":"10.0.0.300"}`, "", `ipam.gateway "10.0.0.300" is not an IP address`},
		{`{"range_start":"10.0.0.5"}`, "", `need ipam.range`},
		{`{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"10.0.0.0/24"}]}`, "", `range 10.0.0.0/24 is given twice`},
		{`{"ipRanges":[{"range":"bad"}]}`, "", `ipam.ipRanges[0].range "bad"`},
		{`{"range":"10.0.0.0/24","routes":[{"gw":"10.0.0.1"}]}`, "", `ipam.routes[0]`},
		{`{"range":"10.0.0.0/24","log_level":"loud"}`, "", `ipam.log_level "loud"`},
		{`{"range":"10.0.0.0/24","addresses":[{"address":"10.0.0.5"}]}`, "", `ipam.addresses[0].address "10.0.0.5"`},
		{`{"range":"10.0.0.0/24","configuration_path":"/nope"}`, "", `ipam.configuration_path "/nope": no such file`},
		{`{"range":"10.0.0.0/24"}`, "IP=10.9.9.9", `CNI_ARGS IP: requested address 10.9.9.9 is not in any range of network "net1" (10.0.0.0/24)`},
		{`{"range":"10.0.0.0/24"}`, "IP=zz", `CNI_ARGS IP: "zz" is not an IP address`},
		{`{"range":"10.0.0.0/24","gateway":"10.0.0.1"}`, "IP=10.0.0.1", `requested address 10.0.0.1 is not in any range`},
	} {
		_, err := ParseConfig(conf(tc.ipam), tc.args, files{}.read)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want %q", tc.ipam, tc.args, err, tc.want)
			continue
		}
		ce := spec.AsError(err, 0)
		if ce.Code != spec.ErrInvalidNetworkConfig && ce.Code != spec.ErrInvalidEnvironment {
			t.Errorf("%s: code %d, want 7 (or 4 for CNI_ARGS)", tc.ipam, ce.Code)
		}
	}
	if _, err := ParseConfig([]byte(`{"name":`), "", nil); spec.AsError(err, 0).Code != spec.ErrDecodingFailure {
		t.Errorf("bad JSON: %v, want code 6", err)
	}
	// An old cniVersion allows one address per family.
	_, err := ParseConfig([]byte(`{"cniVersion":"0.2.0","name":"n","ipam":{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"10.1.0.0/24"}]}}`), "", nil)
	if err == nil || !strings.Contains(err.Error(), `cniVersion "0.2.0" allows one address per family`) {
		t.Errorf("0.2.0 with two IPv4 ranges: %v", err)
	}
}

// Requested addresses: runtimeConfig.ips and args.cni.ips win over
// CNI_ARGS IP= (CNI conventions); excluded addresses and addresses outside
// range_start..range_end may be requested; a claim reference is exclusive
// with requests and needs the pod's namespace.
func TestRequested(t *testing.T) {
	ipam := `{"ipRanges":[{"range":"10.0.0.0/24","range_start":"10.0.0.100","exclude":["10.0.0.0/28"]},{"range":"fd00::/64"}]}`
	n := func(extra string) []byte {
		return []byte(`{"cniVersion":"1.1.0","name":"n","ipam":` + ipam + extra + `}`)
	}
	_, err := ParseConfig(n(`,"runtimeConfig":{"ips":["10.0.0.5/24","fd00::5"]},"args":{"cni":{"ips":["10.0.0.7"]}}`), "IP=10.0.0.9;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u", nil)
	if err == nil || !strings.Contains(err.Error(), "10.0.0.5 and 10.0.0.7 are both in range 10.0.0.0/24") {
		t.Fatalf("two requests in one range: %v", err)
	}
	c, err := ParseConfig(n(`,"runtimeConfig":{"ips":["10.0.0.5/24","fd00::5"]}`), "IgnoreUnknown=1;IP=10.0.0.9;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Requested) != 2 || c.Requested[0].Addr.String() != "10.0.0.5" || c.Requested[1].Source != "runtimeConfig.ips" {
		t.Errorf("requested %+v", c.Requested)
	}
	if c.Pod != (PodRef{"ns", "p", "u"}) {
		t.Errorf("pod %+v", c.Pod)
	}
	c, err = ParseConfig(n(``), "IP=10.0.0.9,fd00::9", nil)
	if err != nil || len(c.Requested) != 2 || c.Requested[1].Source != "CNI_ARGS IP" {
		t.Errorf("CNI_ARGS IP: %+v %v", c, err)
	}
	_, err = ParseConfig(n(`,"args":{"cni":{"ipam-claim-reference":"vm1","ips":["10.0.0.5"]}}`), "K8S_POD_NAMESPACE=ns", nil)
	if err == nil || !strings.Contains(err.Error(), "request static addresses or an IPAMClaim, not both") {
		t.Errorf("claim + ips: %v", err)
	}
	_, err = ParseConfig(n(`,"args":{"cni":{"ipam-claim-reference":"vm1"}}`), "", nil)
	if err == nil || !strings.Contains(err.Error(), "K8S_POD_NAMESPACE is not set") {
		t.Errorf("claim without namespace: %v", err)
	}
	c, err = ParseConfig(n(`,"args":{"cni":{"ipam-claim-reference":"vm1"}}`), "K8S_POD_NAMESPACE=ns", nil)
	if err != nil || c.Claim != "vm1" {
		t.Errorf("claim: %+v %v", c, err)
	}
	_, err = ParseConfig(n(`,"args":{"cni":{"ipam-claim-reference":7}}`), "K8S_POD_NAMESPACE=ns", nil)
	if err == nil || !strings.Contains(err.Error(), "args.cni.ipam-claim-reference 7 is not an IPAMClaim name") {
		t.Errorf("claim 7: %v", err)
	}
}

// Keys missing from the network's ipam come from the first flat file found
// (configuration_path first); enable_overlapping_ranges never does.
func TestFlatFile(t *testing.T) {
	f := files{
		"/etc/cni/net.d/cluster-ipam.d/cluster-ipam.conf": `{"kubernetes":{"kubeconfig":"/flat/kc"},"node_name":"node-7","range":"10.5.0.0/16","enable_overlapping_ranges":false}`,
		"/custom.conf": `{"kubernetes":{"kubeconfig":"/custom/kc"}}`,
	}
	c := mustParse(t, `{"type":"cluster-ipam","range":"10.1.0.0/16"}`, "", f)
	if c.Kubeconfig != "/flat/kc" || c.NodeName != "node-7" || c.Ranges[0].Prefix.String() != "10.1.0.0/16" || !c.Overlapping {
		t.Errorf("merged %+v, range %v", c, c.Ranges[0].Prefix)
	}
	c = mustParse(t, `{"configuration_path":"/custom.conf","range":"10.1.0.0/16","kubernetes":{}}`, "", f)
	if c.Kubeconfig != "/custom/kc" {
		t.Errorf("configuration_path: kubeconfig %q", c.Kubeconfig)
	}
	c = mustParse(t, `{}`, "", f)
	if c.Ranges[0].Prefix.String() != "10.5.0.0/16" {
		t.Errorf("range from the flat file: %v", c.Ranges[0].Prefix)
	}
	// Keys in another case are the same keys (encoding/json's matching).
	c = mustParse(t, `{"Range":"10.1.0.0/16"}`, "", files{FlatFiles[0]: `{"range":"10.9.0.0/16","ENABLE_OVERLAPPING_RANGES":false}`})
	if c.Ranges[0].Prefix.String() != "10.1.0.0/16" || !c.Overlapping {
		t.Errorf("case variants: range %v, overlapping %v", c.Ranges[0].Prefix, c.Overlapping)
	}
	c = mustParse(t, `{"range":""}`, "", files{FlatFiles[0]: `{"RANGE":"10.9.0.0/16"}`})
	if c.Ranges[0].Prefix.String() != "10.9.0.0/16" {
		t.Errorf("empty range, RANGE in the flat file: %v", c.Ranges[0].Prefix)
	}
	if _, err := ParseConfig(conf(`{"range":"10.0.0.0/24"}`), "", files{FlatFiles[0]: "{"}.read); err == nil || !strings.Contains(err.Error(), "is not a JSON object") {
		t.Errorf("bad flat file: %v", err)
	}
	t.Setenv("CLUSTER_IPAM_NODE_NAME", "from-env")
	if c := mustParse(t, `{"range":"10.0.0.0/24"}`, "", nil); c.NodeName != "from-env" {
		t.Errorf("node name %q", c.NodeName)
	}
}

func TestObjectNames(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/24")
	for _, tc := range []struct {
		scope, addr, want string
	}{
		{Scope("", true, p), "10.0.0.5", "10.0.0.5"},
		{Scope("blue", true, p), "10.0.0.5", "n" + hash("blue")[:12] + ".10.0.0.5"},
		{Scope("", false, p), "10.0.0.5", "r" + hash("10.0.0.0/24")[:8] + ".10.0.0.5"},
		{"", "fd00::5", "fd00-0000-0000-0000-0000-0000-0000-0005"},
	} {
		if got := ObjectName(tc.scope, netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("ObjectName(%q, %s) = %s, want %s", tc.scope, tc.addr, got, tc.want)
		}
	}
	if scopeLabel("") != "default" || !validLabelValue(scopeLabel(Scope("x", false, p))) {
		t.Error("scope labels")
	}
	if nodeLabel("node-1") != "node-1" || !strings.HasPrefix(nodeLabel("Node With Spaces"), "h") || nodeLabel(strings.Repeat("a", 64))[0] != 'h' ||
		nodeLabel("-x")[0] != 'h' || nodeLabel("a.b_c-D9") != "a.b_c-D9" {
		t.Error("node labels")
	}
	at := Attachment{Network: "n", ContainerID: strings.Repeat("f", 64), IfName: "eth0"}
	if k := at.Key(); !validLabelValue(k) || k == (Attachment{Network: "m", ContainerID: at.ContainerID, IfName: "eth0"}).Key() {
		t.Errorf("attachment key %q", k)
	}
}

// Candidates stay in the range, off exclusions and the gateway, and spread.
func TestCandidates(t *testing.T) {
	c := mustParse(t, `{"range":"10.0.0.0/26","exclude":["10.0.0.0/28","10.0.0.33"],"gateway":"10.0.0.62"}`, "", nil)
	r := c.Ranges[0]
	seen := map[netip.Addr]int{}
	for i := range 2000 {
		b, _ := json.Marshal(i)
		h := hash(string(b))
		seed := []byte(h[:16])
		a := r.Candidate(seed)
		if !r.Usable(a) {
			t.Fatalf("candidate %s not usable", a)
		}
		seen[a]++
	}
	if len(seen) != int(r.UsableCount().Int64()) {
		t.Errorf("2000 seeds reached %d of %v usable addresses", len(seen), r.UsableCount())
	}
	a := r.Start
	for range 100 {
		a = r.Next(a)
		if !r.Usable(a) {
			t.Fatalf("Next gave %s", a)
		}
	}
}
