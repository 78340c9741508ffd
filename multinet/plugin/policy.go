package plugin

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/multinet/policy"
	"github.com/patchbay-cni/patchbay/spec"
)

// Event reasons of the NAD policy.
const (
	// ReasonPolicyRefused: a NetworkAttachmentDefinition broke the
	// policy and the pod was refused (mode enforce).
	ReasonPolicyRefused = "NetworkAttachmentPolicyRefused"
	// ReasonPolicyAudit: it broke the policy and was attached anyway
	// (mode audit).
	ReasonPolicyAudit = "NetworkAttachmentPolicyAudit"
)

// policySubject is an attachment whose configuration a namespace user may
// have written: a NetworkAttachmentDefinition the pod selects, a
// configured defaultNetworks entry, or the pod's own default network.
// The configured cluster network is never one (it is the operator's).
type policySubject struct {
	att       *Attachment
	namespace string // the NAD's
}

// policySource is where the configuration takes its NAD policy from.
func (c *Config) policySource() policy.Source {
	return policy.Source{Inline: c.NADPolicy, File: c.NADPolicyFile}
}

// Policy loads the configuration's NAD policy (the built-in one when it
// sets none). The daemon calls it at start, so that a policy that does not
// parse fails the start instead of pods.
func (c *Config) Policy() (*policy.Policy, error) { return c.policySource().Load() }

// exemptNamespaces are the namespaces whose NADs the policy does not
// check: the policy's own list, else the operator's namespaces as this
// configuration defines them — globalNamespaces (shared networks),
// systemNamespaces and multusNamespace (the cluster network's
// alternatives).
func (c *Config) exemptNamespaces(p *policy.Policy) []string {
	if p.ExemptNamespaces != nil {
		return p.ExemptNamespaces
	}
	out := slices.Clone([]string(c.GlobalNamespaces))
	out = append(out, c.SystemNamespaces...)
	return append(out, c.MultusNamespace)
}

// checkPolicy applies the NAD policy to the subjects before anything is
// attached. A refused network fails ADD with code 7 naming the NAD, the
// plugin, the key and the rule, and records one Warning Event on the pod
// (audit mode: the Event and a log line, and ADD goes on). reserved are
// the cluster network's names. The policy is read only when there is a
// subject, so a pod on the cluster network alone never depends on it.
func (inv *invocation) checkPolicy(ctx context.Context, info *apiInfo, subjects []policySubject, reserved []string) error {
	if len(subjects) == 0 {
		return nil
	}
	pol, err := inv.cfg.Policy()
	if err != nil {
		return err
	}
	if pol.Mode == policy.Off {
		return nil
	}
	exempt := inv.cfg.exemptNamespaces(pol)
	var refused []string
	for _, s := range subjects {
		if slices.Contains(exempt, s.namespace) {
			continue
		}
		list, err := s.att.List()
		if err != nil {
			return spec.Errorf(spec.ErrInvalidNetworkConfig, "NetworkAttachmentDefinition %s: %v", s.att.Name, err)
		}
		vs := pol.Check(policy.Network{List: list, CapabilityArgs: s.att.CapabilityArgs, ReservedNames: reserved})
		if len(vs) == 0 {
			continue
		}
		texts := make([]string, len(vs))
		for i, v := range vs {
			texts[i] = v.String()
		}
		refused = append(refused, fmt.Sprintf("NetworkAttachmentDefinition %s breaks the NAD policy (%s): %s",
			s.att.Name, inv.cfg.policySource(), strings.Join(texts, "; ")))
	}
	if len(refused) == 0 {
		return nil
	}
	msg := strings.Join(refused, "; ")
	reason := ReasonPolicyRefused
	if pol.Mode == policy.Audit {
		reason = ReasonPolicyAudit
		inv.log.Warn("NAD policy audit: attached anyway", "pod", inv.pod.ref(), "problem", msg)
	} else {
		inv.log.Warn("NAD policy: pod refused", "pod", inv.pod.ref(), "problem", msg)
	}
	if client, err := inv.kube(); err == nil && info != nil {
		if err := client.CreateEvent(ctx, info.pod, kube.EventWarning, reason, msg, "multinet", eventHost(info.pod)); err != nil {
			inv.log.Warn("cannot record the event", "pod", inv.pod.ref(), "error", err)
		}
	}
	if pol.Mode == policy.Audit {
		return nil
	}
	return spec.Errorf(spec.ErrInvalidNetworkConfig, "%s", msg)
}

// runsMultinet says whether a network runs multinet (or its thick shim)
// anywhere: as a plugin of the list, as an "ipam", or as a delegate of a
// delegating plugin. Either would read the same pod and delegate to the
// same networks again, or wait for this container's lock for ever.
func runsMultinet(l *spec.ConfList) bool {
	for _, p := range l.Plugins {
		if p.Network.Type == "multinet" || p.Network.Type == "multinet-shim" {
			return true
		}
		// Decoding every level costs microseconds per plugin; a
		// configuration that cannot name the type is not decoded.
		if !bytes.Contains(p.Bytes, []byte("multinet")) && !bytes.Contains(p.Bytes, []byte(`\u`)) {
			continue
		}
		for _, t := range policy.Types(&spec.ConfList{Plugins: []*spec.PluginConf{p}}) {
			if t == "multinet" || t == "multinet-shim" {
				return true
			}
		}
	}
	return false
}
