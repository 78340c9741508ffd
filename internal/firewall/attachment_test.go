package firewall

import "testing"

// TestNetworkOwnerKeepsByTag: GC's owner keeps a valid attachment's rules
// by the tag their comments start with, whatever follows it (another
// feature's wording, a cut), and selects the rules of the network's other
// attachments only.
func TestNetworkOwnerKeepsByTag(t *testing.T) {
	valid := Attachment{Network: "n1", IfName: "eth0", ContainerID: "c1"}
	stale := Attachment{Network: "n1", IfName: "eth0", ContainerID: "c2"}
	other := Attachment{Network: "n2", IfName: "eth0", ContainerID: "c1"}
	o := NetworkOwner("n1", []Attachment{{IfName: "eth0", ContainerID: "c1"}})
	comment := func(a Attachment, what string) string {
		c, _, err := AttachmentComment(a, what)
		if err != nil {
			t.Fatal(err)
		}
		return c.s
	}
	for _, c := range []struct {
		comment string
		owned   bool
	}{
		{comment(valid, "firewall"), false},
		{comment(valid, "firewall (older wording)"), false},
		{comment(valid, "firewall")[:40], false},
		{masqComment(valid), false},
		{comment(stale, "firewall"), true},
		{masqComment(stale), true},
		{comment(other, "firewall"), false},
		{"an operator's rule", false},
	} {
		if got := o.owns(c.comment); got != c.owned {
			t.Errorf("owns(%q) = %v, want %v", c.comment, got, c.owned)
		}
	}
}
