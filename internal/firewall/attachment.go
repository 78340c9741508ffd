package firewall

import (
	"fmt"
	"strings"
)

// Tagging an attachment's rules in a table of our own layout: the comment
// starts with a hash of the network and one of the interface and container
// ID (fixed length, so one network's prefix never starts another's), then
// says what the rule is for and names the attachment for operators, cut to
// what nft accepts. Remove finds one attachment's rules by the first part,
// GC a network's by its hash with the valid attachments kept.

// AttachmentComment is the comment for one attachment's rules of feature
// what, and the owner that selects them.
func AttachmentComment(a Attachment, what string) (Comment, Owner, error) {
	strip := func(s string) string { return strings.ReplaceAll(s, `"`, "") }
	s := fmt.Sprintf("%s, %s, net: %s, if: %s, id: %s", instanceHash(a), strip(what), strip(a.Network), strip(a.IfName), strip(a.ContainerID))
	if len(s) > nftComment {
		s = s[:nftComment]
	}
	c, err := NewComment("rule comment", s)
	if err != nil {
		return Comment{}, Owner{}, err
	}
	return c, Owner{Prefix: instanceHash(a) + ","}, nil
}

// NetworkOwner selects the rules of every attachment of network (in a
// table of one feature) except those in keep (GC), which are kept by the
// tag their comments start with (see AttachmentComment): a hash of
// strings, which every attachment has, whatever the rest of its comment.
func NetworkOwner(network string, keep []Attachment) Owner {
	o := Owner{Prefix: networkHash(network) + "-"}
	for _, a := range keep {
		a.Network = network
		o.KeepPrefixes = append(o.KeepPrefixes, instanceHash(a)+",")
	}
	return o
}
