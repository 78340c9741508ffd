package selection

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

const podNS = "my-namespace"

func parse(a string) *Result { return Parse(a, podNS, Options{DefaultInterface: "eth0"}) }

func addrs(s ...string) []netip.Addr {
	out := []netip.Addr{}
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// sel is a Selection in the pod namespace with a generated interface.
func sel(i int, name, ifname string) *Selection {
	return &Selection{Index: i, Namespace: podNS, Name: name, Interface: ifname}
}

func with(s *Selection, f func(*Selection)) *Selection { f(s); return s }

func checkSelections(t *testing.T, annotation string, want []*Selection) {
	t.Helper()
	r := parse(annotation)
	for _, p := range r.Problems {
		t.Errorf("unexpected problem: %s", p)
	}
	if !reflect.DeepEqual(r.Selections, want) {
		g, _ := json.MarshalIndent(r.Selections, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("selections of %s\ngot  %s\nwant %s", annotation, g, w)
	}
}

// The spec's own example annotations, §4.1.1 to §4.2.2.
func TestParseSpecExamples(t *testing.T) {
	for _, tc := range []struct {
		section, annotation string
		want                []*Selection
	}{
		{"4.1.1 comma-delimited", `net-a,net-b,other-ns/net-c`, []*Selection{
			sel(0, "net-a", "net1"), sel(1, "net-b", "net2"),
			{Index: 2, Namespace: "other-ns", Name: "net-c", Interface: "net3"},
		}},
		{"4.1.2 JSON list", `
[
{"name":"net-a"},
{
"name":"net-b",
"ips": ["1.2.3.4"],
"mac": "aa:bb:cc:dd:ee:ff"
},
{
"name":"net-c",
"namespace":"other-ns"
}
]`, []*Selection{
			sel(0, "net-a", "net1"),
			with(sel(1, "net-b", "net2"), func(s *Selection) { s.IPs = []string{"1.2.3.4"}; s.MAC = "aa:bb:cc:dd:ee:ff" }),
			{Index: 2, Namespace: "other-ns", Name: "net-c", Interface: "net3"},
		}},
		{"4.1.2.1.3.1 ips", `[{"name":"net-b","ips": ["10.2.2.42/24", "2001:db8::5/64"]}]`, []*Selection{
			with(sel(0, "net-b", "net1"), func(s *Selection) { s.IPs = []string{"10.2.2.42/24", "2001:db8::5/64"} }),
		}},
		{"4.1.2.1.4.1 mac", `[{"name":"net-b","mac": "02:23:45:67:89:01"}]`, []*Selection{
			with(sel(0, "net-b", "net1"), func(s *Selection) { s.MAC = "02:23:45:67:89:01" }),
		}},
		// The spec prints “on” with typographic quotes; JSON needs plain ones.
		{"4.1.2.1.6.1 cni-args", `[{"name":"net-b","cni-args": {"spoofchk": "on"}}]`, []*Selection{
			with(sel(0, "net-b", "net1"), func(s *Selection) { s.CNIArgs = map[string]json.RawMessage{"spoofchk": raw(`"on"`)} }),
		}},
		{"4.1.2.1.7.1 portMappings", `[{"name":"net-b","portMappings": [{ "hostPort": 8080, "containerPort": 80, "protocol": "tcp" }]}]`, []*Selection{
			with(sel(0, "net-b", "net1"), func(s *Selection) {
				s.PortMappings = []spec.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}
			}),
		}},
		// The spec's example has a missing quote and // comments; this is it as JSON.
		{"4.1.2.1.8.1 bandwidth", `[{"name":"net-b","bandwidth": {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200}}]`, []*Selection{
			with(sel(0, "net-b", "net1"), func(s *Selection) {
				s.Bandwidth = &spec.Bandwidth{IngressRate: 2048, IngressBurst: 300, EgressRate: 8000, EgressBurst: 200}
			}),
		}},
		{"4.1.2.1.9.1 default-route", `[{ "name":"net-a" },{"name":"net-b","default-route": ["10.0.0.1"]}]`, []*Selection{
			sel(0, "net-a", "net1"),
			with(sel(1, "net-b", "net2"), func(s *Selection) { s.HasDefaultRoute = true; s.DefaultRoute = addrs("10.0.0.1") }),
		}},
		{"4.1.2.1.10.1 infiniband-guid", `[{"name":"net-b","infiniband-guid": "24:8a:07:03:00:8d:ae:2f"}]`, []*Selection{
			with(sel(0, "net-b", "net1"), func(s *Selection) { s.InfinibandGUID = "24:8a:07:03:00:8d:ae:2f" }),
		}},
		{"4.1.2.1.11.1 ipam-claim-reference", `[{ "name":"net-a" },{"name":"net-b","ipam-claim-reference": "vm123.tenantblue"}]`, []*Selection{
			sel(0, "net-a", "net1"),
			with(sel(1, "net-b", "net2"), func(s *Selection) { s.IPAMClaimReference = "vm123.tenantblue" }),
		}},
		// §4.2: the same network twice is two attachments, with two interfaces.
		{"4.2.2 same network twice", `net-a,net-a`, []*Selection{sel(0, "net-a", "net1"), sel(1, "net-a", "net2")}},
		{"4.2 same network twice, JSON", `[{"name":"net-a"},{"name":"net-a"}]`, []*Selection{sel(0, "net-a", "net1"), sel(1, "net-a", "net2")}},
		{"3.3.1 examples", `example-namespace/attachment-name,attachment-name`, []*Selection{
			{Index: 0, Namespace: "example-namespace", Name: "attachment-name", Interface: "net1"},
			sel(1, "attachment-name", "net2"),
		}},
	} {
		t.Run(tc.section, func(t *testing.T) { checkSelections(t, tc.annotation, tc.want) })
	}
}

func TestParseCommaFormat(t *testing.T) {
	req := func(s *Selection) *Selection { s.InterfaceRequested = true; return s }
	for _, tc := range []struct {
		name, annotation string
		want             []*Selection
	}{
		{"empty", ``, nil},
		{"blank", "  \t\n ", nil},
		{"name", `net-a`, []*Selection{sel(0, "net-a", "net1")}},
		{"ns/name", `other/net-a`, []*Selection{{Index: 0, Namespace: "other", Name: "net-a", Interface: "net1"}}},
		{"name@ifname", `net-a@eth1`, []*Selection{req(sel(0, "net-a", "eth1"))}},
		{"ns/name@ifname", `other/net-a@eth1`, []*Selection{req(&Selection{Index: 0, Namespace: "other", Name: "net-a", Interface: "eth1"})}},
		{"blanks around items and parts", " net-a ,\tother / net-b @ eth9 ,\n net-c", []*Selection{
			sel(0, "net-a", "net1"),
			req(&Selection{Index: 1, Namespace: "other", Name: "net-b", Interface: "eth9"}),
			sel(2, "net-c", "net2"),
		}},
		{"dotted name (DNS-1123 subdomain)", `a.b-c.d`, []*Selection{sel(0, "a.b-c.d", "net1")}},
		{"explicit netN is skipped by generated names", `net-a,net-b@net1,net-c@net3`, []*Selection{
			sel(0, "net-a", "net2"), req(sel(1, "net-b", "net1")), req(sel(2, "net-c", "net3")),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSelections(t, tc.annotation, tc.want) })
	}
}

// Values every key accepts, with what the Selection holds.
func TestParseValidValues(t *testing.T) {
	one := func(f func(*Selection)) []*Selection { return []*Selection{with(sel(0, "n", "net1"), f)} }
	for _, tc := range []struct {
		name, annotation string
		want             []*Selection
	}{
		{"ips plain v4 and v6", `[{"name":"n","ips":["10.0.0.1","2001:db8::5"]}]`, one(func(s *Selection) { s.IPs = []string{"10.0.0.1", "2001:db8::5"} })},
		{"ips with prefixes", `[{"name":"n","ips":["10.0.0.1/8","2001:db8::5/128"]}]`, one(func(s *Selection) { s.IPs = []string{"10.0.0.1/8", "2001:db8::5/128"} })},
		{"mac with dashes", `[{"name":"n","mac":"02-23-45-67-89-01"}]`, one(func(s *Selection) { s.MAC = "02-23-45-67-89-01" })},
		{"mac upper case", `[{"name":"n","mac":"02:AB:45:67:89:01"}]`, one(func(s *Selection) { s.MAC = "02:AB:45:67:89:01" })},
		{"interface", `[{"name":"n","interface":"eth1.100"}]`, one(func(s *Selection) { s.Interface = "eth1.100"; s.InterfaceRequested = true })},
		{"interface 15 chars", `[{"name":"n","interface":"abcdefghijklmno"}]`, one(func(s *Selection) { s.Interface = "abcdefghijklmno"; s.InterfaceRequested = true })},
		{"namespace empty means pod namespace", `[{"name":"n","namespace":""}]`, one(func(*Selection) {})},
		{"null values mean absent", `[{"name":"n","namespace":null,"ips":null,"mac":null,"cni-args":null}]`, one(func(*Selection) {})},
		{"portMappings protocol default and case", `[{"name":"n","portMappings":[{"hostPort":1,"containerPort":65535},{"hostPort":53,"containerPort":53,"protocol":"UDP"},{"hostPort":9,"containerPort":9,"protocol":"Sctp","hostIP":"192.0.2.1"}]}]`,
			one(func(s *Selection) {
				s.PortMappings = []spec.PortMapping{{HostPort: 1, ContainerPort: 65535, Protocol: "tcp"},
					{HostPort: 53, ContainerPort: 53, Protocol: "udp"}, {HostPort: 9, ContainerPort: 9, Protocol: "sctp", HostIP: "192.0.2.1"}}
			})},
		{"bandwidth rate only", `[{"name":"n","bandwidth":{"egressRate":1000000}}]`, one(func(s *Selection) { s.Bandwidth = &spec.Bandwidth{EgressRate: 1000000} })},
		{"default-route may be empty", `[{"name":"n","default-route":[]}]`, one(func(s *Selection) { s.HasDefaultRoute = true; s.DefaultRoute = addrs() })},
		{"default-route v4 and v6 gateways", `[{"name":"n","default-route":["192.0.2.1","2001:db8::1"]}]`, one(func(s *Selection) {
			s.HasDefaultRoute = true
			s.DefaultRoute = addrs("192.0.2.1", "2001:db8::1")
		})},
		{"extension keys are kept", `[{"name":"n","org.example.vlan":7}]`, one(func(s *Selection) { s.Extensions = map[string]json.RawMessage{"org.example.vlan": raw("7")} })},
		{"cni-args nested", `[{"name":"n","cni-args":{"a":{"b":[1,2]},"c":true}}]`, one(func(s *Selection) {
			s.CNIArgs = map[string]json.RawMessage{"a": raw(`{"b":[1,2]}`), "c": raw("true")}
		})},
		{"empty list", `[]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSelections(t, tc.annotation, tc.want) })
	}
}

type wantProblem struct {
	Index    int
	Key      string
	Severity Severity
	Message  string
}

func TestParseProblems(t *testing.T) {
	const e0 = `networks[0] ("my-namespace/net-b"): `
	ign := func(key, msg string) []wantProblem { return []wantProblem{{0, key, Ignored, e0 + msg}} }
	fat := func(key, msg string) []wantProblem { return []wantProblem{{0, key, Fatal, e0 + msg}} }
	el := func(extra string) string { return `[{"name":"net-b",` + extra + `}]` }
	for _, tc := range []struct {
		name, annotation string
		want             []wantProblem
	}{
		// §4.1.2.1.3 ips: invalid → annotation ignored.
		{"ips empty list", el(`"ips":[]`), ign("ips", `"ips" must contain at least one address`)},
		{"ips not a list", el(`"ips":"1.2.3.4"`), ign("ips", `"ips" must be a list of strings, got "1.2.3.4"`)},
		{"ips bad address", el(`"ips":["10.0.0.1","1.2.3.256"]`), ign("ips", `"ips" value "1.2.3.256" is not an IPv4 or IPv6 address with an optional prefix length`)},
		{"ips bad prefix", el(`"ips":["10.0.0.1/33"]`), ign("ips", `"ips" value "10.0.0.1/33" is not an IPv4 or IPv6 address with an optional prefix length`)},
		{"ips zone", el(`"ips":["fe80::1%eth0"]`), ign("ips", `"ips" value "fe80::1%eth0" is not an IPv4 or IPv6 address with an optional prefix length`)},
		// §4.1.2.1.4 mac.
		{"mac garbage", el(`"mac":"zz:bb:cc:dd:ee:ff"`), ign("mac", `"mac" value "zz:bb:cc:dd:ee:ff" is not a valid 6-byte Ethernet MAC address`)},
		{"mac 8 bytes", el(`"mac":"24:8a:07:03:00:8d:ae:2f"`), ign("mac", `"mac" value "24:8a:07:03:00:8d:ae:2f" is not a valid 6-byte Ethernet MAC address`)},
		{"mac multicast", el(`"mac":"01:00:5e:00:00:01"`), ign("mac", `"mac" value "01:00:5e:00:00:01" is a multicast address, which cannot be assigned to an interface`)},
		{"mac zero", el(`"mac":"00:00:00:00:00:00"`), ign("mac", `"mac" value "00:00:00:00:00:00" is the all-zero address, which cannot be assigned to an interface`)},
		{"mac number", el(`"mac":5`), ign("mac", `"mac" must be a string, got 5`)},
		// §4.1.2.1.5 interface.
		{"interface empty", el(`"interface":""`), ign("interface", `"interface" value "" is empty`)},
		{"interface too long", el(`"interface":"abcdefghijklmnop"`), ign("interface", `"interface" value "abcdefghijklmnop" is longer than 15 characters`)},
		{"interface slash", el(`"interface":"a/b"`), ign("interface", `"interface" value "a/b" contains '/', which Linux does not allow in interface names`)},
		{"interface space", el(`"interface":"a b"`), ign("interface", `"interface" value "a b" contains ' ', which Linux does not allow in interface names`)},
		{"interface dotdot", el(`"interface":".."`), ign("interface", `"interface" value ".." is not a usable name`)},
		{"interface number", el(`"interface":5`), ign("interface", `"interface" must be a string, got 5`)},
		{"interface after @", `net-b@a:b`, ign("interface", `interface "a:b" (after '@') contains ':', which Linux does not allow in interface names`)},
		// §4.1.2.1.6 cni-args: no "ignored" rule, so a bad type fails.
		{"cni-args string", el(`"cni-args":"x"`), fat("cni-args", `"cni-args" must be a JSON object, got "x"`)},
		{"cni-args list", el(`"cni-args":[]`), fat("cni-args", `"cni-args" must be a JSON object, got []`)},
		// §4.1.2.1.7 portMappings.
		{"portMappings empty", el(`"portMappings":[]`), ign("portMappings", `"portMappings" must contain at least one mapping`)},
		{"portMappings object", el(`"portMappings":{"hostPort":80,"containerPort":80}`), ign("portMappings", `"portMappings" must be a list of objects, got {"hostPort":80,"containerPort":80}`)},
		{"portMappings port 0", el(`"portMappings":[{"hostPort":0,"containerPort":80}]`), ign("portMappings", `"portMappings" [0].hostPort 0 must be an integer between 1 and 65535`)},
		{"portMappings port 65536", el(`"portMappings":[{"hostPort":80,"containerPort":65536}]`), ign("portMappings", `"portMappings" [0].containerPort 65536 must be an integer between 1 and 65535`)},
		{"portMappings port string", el(`"portMappings":[{"hostPort":"8080","containerPort":80}]`), ign("portMappings", `"portMappings" [0].hostPort "8080" must be an integer between 1 and 65535`)},
		{"portMappings port fraction", el(`"portMappings":[{"hostPort":80.5,"containerPort":80}]`), ign("portMappings", `"portMappings" [0].hostPort 80.5 must be an integer between 1 and 65535`)},
		{"portMappings missing containerPort", el(`"portMappings":[{"hostPort":8080}]`), ign("portMappings", `"portMappings" [0] is missing required key "containerPort"`)},
		{"portMappings protocol", el(`"portMappings":[{"hostPort":1,"containerPort":1},{"hostPort":8080,"containerPort":80,"protocol":"icmp"}]`), ign("portMappings", `"portMappings" [1].protocol "icmp" must be one of UDP, TCP or SCTP`)},
		{"portMappings unknown key", el(`"portMappings":[{"hostPort":8080,"containerPort":80,"hostip":"1.2.3.4"}]`), ign("portMappings", `"portMappings" [0] has unknown key "hostip" (allowed: hostPort, containerPort, protocol, hostIP)`)},
		{"portMappings bad hostIP", el(`"portMappings":[{"hostPort":8080,"containerPort":80,"hostIP":"x"}]`), ign("portMappings", `"portMappings" [0].hostIP "x" is not an IP address`)},
		// §4.1.2.1.8 bandwidth.
		{"bandwidth empty", el(`"bandwidth":{}`), ign("bandwidth", `"bandwidth" must contain at least one of ingressRate, ingressBurst, egressRate, egressBurst`)},
		{"bandwidth zero", el(`"bandwidth":{"ingressRate":0}`), ign("bandwidth", `"bandwidth" ingressRate 0 must be a non-zero positive integer`)},
		{"bandwidth negative", el(`"bandwidth":{"egressRate":-5}`), ign("bandwidth", `"bandwidth" egressRate -5 must be a non-zero positive integer`)},
		{"bandwidth string", el(`"bandwidth":{"ingressRate":"5"}`), ign("bandwidth", `"bandwidth" ingressRate "5" must be a non-zero positive integer`)},
		{"bandwidth burst without rate", el(`"bandwidth":{"ingressRate":5,"egressBurst":300}`), ign("bandwidth", `"bandwidth" has egressBurst without egressRate`)},
		{"bandwidth ingress burst without rate", el(`"bandwidth":{"ingressBurst":300}`), ign("bandwidth", `"bandwidth" has ingressBurst without ingressRate`)},
		{"bandwidth unknown key", el(`"bandwidth":{"ingressRate":2048,"rate":1}`), ign("bandwidth", `"bandwidth" has unknown key "rate" (allowed: ingressRate, ingressBurst, egressRate, egressBurst)`)},
		{"bandwidth list", el(`"bandwidth":[1]`), ign("bandwidth", `"bandwidth" must be an object, got [1]`)},
		// §4.1.2.1.9 default-route.
		{"default-route prefix", el(`"default-route":["10.0.0.1/24"]`), ign("default-route", `"default-route" value "10.0.0.1/24" is not a gateway IP address`)},
		{"default-route string", el(`"default-route":"10.0.0.1"`), ign("default-route", `"default-route" must be a list of gateway IP addresses, got "10.0.0.1"`)},
		{"default-route twice", `[{"name":"net-a","default-route":[]},{"name":"net-b","default-route":["10.0.0.1"]}]`, []wantProblem{{1, "default-route", Ignored,
			`networks[1] ("my-namespace/net-b"): "default-route" is also set on networks[0] ("my-namespace/net-a"); only one attachment may set it`}}},
		// §4.1.2.1.10 infiniband-guid.
		{"infiniband-guid 6 bytes", el(`"infiniband-guid":"24:8a:07:03:00:8d"`), ign("infiniband-guid", `"infiniband-guid" value "24:8a:07:03:00:8d" is not a valid 8-byte InfiniBand GUID`)},
		// §4.1.2.1.11 ipam-claim-reference.
		{"ips with ipam-claim-reference", el(`"ips":["10.0.0.1"],"ipam-claim-reference":"vm123.tenantblue"`), fat("ipam-claim-reference",
			`"ips" and "ipam-claim-reference" are both set; request static IPs or an IPAMClaim, not both`)},
		{"ipam-claim-reference invalid", el(`"ipam-claim-reference":"Bad_Name"`), fat("ipam-claim-reference",
			`"ipam-claim-reference" value "Bad_Name" is not a valid object name: it contains 'B': a DNS-1123 label must consist of lower case alphanumeric characters or '-'`)},
		{"ipam-claim-reference number", el(`"ipam-claim-reference":5`), fat("ipam-claim-reference", `"ipam-claim-reference" must be a string, got 5`)},
		// §4.1.2.1.1/.2 and §3.3: references that cannot name an object.
		{"name missing", `[{"namespace":"x"}]`, []wantProblem{{0, "name", Fatal, `networks[0]: required key "name" is missing or not a string (got nothing)`}}},
		{"name number", `[{"name":5}]`, []wantProblem{{0, "name", Fatal, `networks[0]: required key "name" is missing or not a string (got 5)`}}},
		{"name upper case", `[{"name":"Net_A"}]`, []wantProblem{{0, "name", Fatal,
			`networks[0] ("Net_A"): network name "Net_A" is invalid: it contains 'N': a DNS-1123 label must consist of lower case alphanumeric characters or '-'`}}},
		{"name empty unit", `[{"name":"a..b"}]`, []wantProblem{{0, "name", Fatal,
			`networks[0] ("a..b"): network name "a..b" is invalid: it has an empty unit at position 2 (units are DNS-1123 labels joined by '.')`}}},
		{"name bad unit", `[{"name":"a.-b"}]`, []wantProblem{{0, "name", Fatal,
			`networks[0] ("a.-b"): network name "a.-b" is invalid: it has unit "-b" that must start and end with an alphanumeric character (DNS-1123 label)`}}},
		{"name too long", `[{"name":"` + strings.Repeat("a", 254) + `"}]`, []wantProblem{{0, "name", Fatal,
			`networks[0] ("` + strings.Repeat("a", 254) + `"): network name "` + strings.Repeat("a", 254) + `" is invalid: it is longer than 253 characters`}}},
		{"namespace upper case", `[{"name":"net-a","namespace":"Other"}]`, []wantProblem{{0, "namespace", Fatal,
			`networks[0] ("net-a"): namespace "Other" is invalid: it contains 'O': a DNS-1123 label must consist of lower case alphanumeric characters or '-'`}}},
		{"namespace too long", `[{"name":"net-a","namespace":"` + strings.Repeat("n", 64) + `"}]`, []wantProblem{{0, "namespace", Fatal,
			`networks[0] ("net-a"): namespace "` + strings.Repeat("n", 64) + `" is invalid: it is longer than 63 characters`}}},
		{"namespace with dot", `ns.x/net-a`, []wantProblem{{0, "namespace", Fatal,
			`networks[0] ("ns.x/net-a"): namespace "ns.x" is invalid: it contains '.': a DNS-1123 label must consist of lower case alphanumeric characters or '-'`}}},
		{"namespace number", `[{"name":"net-a","namespace":7}]`, []wantProblem{{0, "namespace", Fatal, `networks[0] ("net-a"): "namespace" must be a string, got 7`}}},
		// Malformed annotations.
		{"bad JSON", `[`, []wantProblem{{-1, "", Fatal, `the annotation is not a valid JSON list: unexpected end of JSON input`}}},
		{"single object", `{"name":"a"}`, []wantProblem{{-1, "", Fatal, `the annotation is a single JSON object; the JSON format is a list of objects: [{...}]`}}},
		{"string element", `["net-a"]`, []wantProblem{{0, "", Fatal, `networks[0]: element is not a JSON object: "net-a"`}}},
		{"stray comma", `net-a,,net-b`, []wantProblem{{1, "", Fatal, `networks[1]: item is empty (stray comma?) in "net-a,,net-b"`}}},
		{"trailing comma", `net-a,`, []wantProblem{{1, "", Fatal, `networks[1]: item is empty (stray comma?) in "net-a,"`}}},
		{"two slashes", `a/b/c`, []wantProblem{{0, "", Fatal, `networks[0] ("a/b/c"): item "a/b/c" has more than one '/'; the format is [namespace/]name[@interface]`}}},
		{"two ats", `a@b@c`, []wantProblem{{0, "", Fatal, `networks[0] ("a@b@c"): item "a@b@c" has more than one '@'`}}},
		{"empty namespace", `/net-a`, []wantProblem{{0, "namespace", Fatal, `networks[0] ("/net-a"): item "/net-a" has an empty namespace before '/'`}}},
		{"empty name", `ns/`, []wantProblem{{0, "name", Fatal, `networks[0] ("ns/"): network name "" is invalid: it is empty`}}},
		// §4.1.2.1.5: a name already in use fails.
		{"interface of the default network", `net-b@eth0`, fat("interface", `interface "eth0" is already used by the cluster-wide default network attachment`)},
		{"interface twice", `net-a@net1,net-b@net1`, []wantProblem{{1, "interface", Fatal,
			`networks[1] ("my-namespace/net-b"): interface "net1" is already used by networks[0] ("my-namespace/net-a")`}}},
		{"interface twice JSON", `[{"name":"net-a","interface":"eth1"},{"name":"net-a"},{"name":"net-b","interface":"eth1"}]`, []wantProblem{{2, "interface", Fatal,
			`networks[2] ("my-namespace/net-b"): interface "eth1" is already used by networks[0] ("my-namespace/net-a")`}}},
		// Both kinds: fatal wins, every problem is listed.
		{"ignored and fatal", el(`"mac":"bad","ips":["10.0.0.1"],"ipam-claim-reference":"c"`), []wantProblem{
			{0, "mac", Ignored, e0 + `"mac" value "bad" is not a valid 6-byte Ethernet MAC address`},
			{0, "ipam-claim-reference", Fatal, e0 + `"ips" and "ipam-claim-reference" are both set; request static IPs or an IPAMClaim, not both`},
		}},
		{"problems in several elements", `[{"name":"net-a","mac":"x"},{"name":"net-b","ips":[]}]`, []wantProblem{
			{0, "mac", Ignored, `networks[0] ("my-namespace/net-a"): "mac" value "x" is not a valid 6-byte Ethernet MAC address`},
			{1, "ips", Ignored, `networks[1] ("my-namespace/net-b"): "ips" must contain at least one address`},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parse(tc.annotation)
			var got []wantProblem
			for _, p := range r.Problems {
				got = append(got, wantProblem{p.Index, p.Key, p.Severity, p.Message})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems of %s\ngot  %+v\nwant %+v", tc.annotation, got, tc.want)
			}
			if len(r.Selections) != 0 {
				t.Errorf("an invalid annotation must select nothing, got %d selections", len(r.Selections))
			}
			worst := tc.want[len(tc.want)-1].Severity
			for _, w := range tc.want {
				worst = max(worst, w.Severity)
			}
			if r.Fatal() != (worst == Fatal) || r.Ignored() != (worst == Ignored) {
				t.Errorf("Fatal()=%v Ignored()=%v, want worst severity %v", r.Fatal(), r.Ignored(), worst)
			}
			if (r.Err() != nil) != (worst == Fatal) {
				t.Errorf("Err() = %v with worst severity %v", r.Err(), worst)
			}
		})
	}
}

// Unknown reserved keys are reported but do not drop the attachment.
func TestParseWarnings(t *testing.T) {
	r := parse(`[{"name":"net-a","interfaceRequest":"x","org.example.foo":1}]`)
	if r.Fatal() || r.Ignored() || len(r.Selections) != 1 {
		t.Fatalf("warnings must not drop the selection: %+v", r)
	}
	want := []Problem{{Index: 0, Network: "my-namespace/net-a", Key: "interfaceRequest", Severity: Warning, Section: "4.1.2.1",
		Message: `networks[0] ("my-namespace/net-a"): unknown key "interfaceRequest" is ignored (keys without a '.' are reserved for the spec; implementation keys use reverse domain names)`}}
	if !reflect.DeepEqual(r.Problems, want) {
		t.Errorf("got %+v\nwant %+v", r.Problems, want)
	}
	if got := r.Problems[0].String(); got != want[0].Message {
		t.Errorf("String() of a warning = %q", got)
	}
}

func TestProblemStringAndErr(t *testing.T) {
	r := parse(`[{"name":"net-b","mac":"x"}]`)
	if got, want := r.Problems[0].String(), `networks[0] ("my-namespace/net-b"): "mac" value "x" is not a valid 6-byte Ethernet MAC address; the k8s.v1.cni.cncf.io/networks annotation is invalid and ignored (multi-net spec §4.1.2.1.4)`; got != want {
		t.Errorf("ignored String()\ngot  %s\nwant %s", got, want)
	}
	if r.Err() != nil {
		t.Errorf("an ignored annotation is not an error: %v", r.Err())
	}
	r = parse(`net-a@eth0,Bad`)
	if got, want := r.Problems[0].String(), `networks[1] ("Bad"): network name "Bad" is invalid: it contains 'B': a DNS-1123 label must consist of lower case alphanumeric characters or '-'; pod network setup fails (multi-net spec §3.3)`; got != want {
		t.Errorf("fatal String()\ngot  %s\nwant %s", got, want)
	}
	err := r.Err()
	ce, ok := err.(*spec.Error)
	if !ok || ce.Code != spec.ErrInvalidNetworkConfig {
		t.Fatalf("Err() = %#v, want *spec.Error code 7", err)
	}
	want := `invalid k8s.v1.cni.cncf.io/networks annotation: networks[1] ("Bad"): network name "Bad" is invalid: it contains 'B': a DNS-1123 label must consist of lower case alphanumeric characters or '-'; networks[0] ("my-namespace/net-a"): interface "eth0" is already used by the cluster-wide default network attachment`
	if ce.Msg != want {
		t.Errorf("Err().Msg\ngot  %s\nwant %s", ce.Msg, want)
	}
}

func TestInterfaceNames(t *testing.T) {
	ifnames := func(r *Result) []string {
		var out []string
		for _, s := range r.Selections {
			out = append(out, s.Interface)
		}
		return out
	}
	for _, tc := range []struct {
		name, annotation string
		opts             Options
		want             []string
	}{
		{"generated in order", `a,b,c`, Options{}, []string{"net1", "net2", "net3"}},
		{"explicit later name is skipped", `a,b,c@net2`, Options{}, []string{"net1", "net3", "net2"}},
		{"explicit names everywhere", `a@x,b,c@net1`, Options{}, []string{"x", "net2", "net1"}},
		{"default interface skipped", `a,b`, Options{DefaultInterface: "net1"}, []string{"net2", "net3"}},
		{"custom prefix", `a,b`, Options{InterfacePrefix: "eth", DefaultInterface: "eth0"}, []string{"eth1", "eth2"}},
		{"same network twice, explicit and generated", `[{"name":"a","interface":"net1"},{"name":"a"}]`, Options{}, []string{"net1", "net2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Parse(tc.annotation, podNS, tc.opts)
			if len(r.Problems) > 0 {
				t.Fatalf("problems: %+v", r.Problems)
			}
			if got := ifnames(r); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v want %v", got, tc.want)
			}
			// The same annotation always gives the same names (DEL must
			// reproduce ADD's tuple, §4.2.1).
			if again := ifnames(Parse(tc.annotation, podNS, tc.opts)); !reflect.DeepEqual(again, tc.want) {
				t.Errorf("not deterministic: %v", again)
			}
		})
	}
	r := Parse(`a`, podNS, Options{InterfacePrefix: "averyverylongprefix"})
	if !r.Fatal() || !strings.Contains(r.Problems[0].Message, `generated interface name "averyverylongprefix1" is longer than 15 characters`) {
		t.Errorf("too long prefix: %+v", r.Problems)
	}
}

func TestNamespaceDefaulting(t *testing.T) {
	r := Parse(`net-a`, "", Options{})
	if !r.Fatal() || r.Problems[0].Message != `networks[0] ("net-a"): namespace "" is invalid: it is empty` {
		t.Fatalf("no pod namespace and no namespace given must fail: %+v", r.Problems)
	}
	r = Parse(`[{"name":"a"},{"name":"b","namespace":"other"}]`, "pod-ns", Options{})
	if r.Selections[0].Ref() != "pod-ns/a" || r.Selections[1].Ref() != "other/b" {
		t.Errorf("refs: %s %s", r.Selections[0].Ref(), r.Selections[1].Ref())
	}
}

func TestNamespaceIsolation(t *testing.T) {
	s := func(ns string) *Selection { return &Selection{Namespace: ns, Name: "net-a"} }
	for _, tc := range []struct {
		name    string
		podNS   string
		global  []string
		sel     *Selection
		allowed bool
		msg     string
	}{
		{"own namespace", "team-a", nil, s("team-a"), true, `network "team-a/net-a" is in the pod's own namespace`},
		{"global namespace", "team-a", []string{"default", "shared"}, s("shared"), true, `network "shared/net-a" is in global namespace "shared"`},
		{"other namespace", "team-a", []string{"default"}, s("team-b"), false,
			`namespace isolation: pod in namespace "team-a" may not use network "team-b/net-a"; allowed are the pod's own namespace and the global namespaces ["default"]`},
		{"no global namespaces", "team-a", nil, s("default"), false,
			`namespace isolation: pod in namespace "team-a" may not use network "default/net-a"; allowed are the pod's own namespace and the global namespaces []`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := CheckNamespaceIsolation(tc.podNS, tc.global, tc.sel)
			if d.Allowed != tc.allowed || d.Message != tc.msg {
				t.Errorf("got %+v\nwant allowed=%v %s", d, tc.allowed, tc.msg)
			}
		})
	}
}
