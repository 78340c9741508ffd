package selection

import (
	"fmt"
	"slices"
)

// Decision is the outcome of a namespace-isolation check.
type Decision struct {
	Allowed bool
	// Message explains the decision, for logs and (when denied) the event.
	Message string
}

// CheckNamespaceIsolation implements the restriction §7.4 allows
// implementations to impose (and Multus calls namespaceIsolation): a pod may
// select NetworkAttachmentDefinitions of its own namespace and of the
// namespaces listed in globalNamespaces only. When denied, §7.4 says the pod
// network operation must fail.
func CheckNamespaceIsolation(podNamespace string, globalNamespaces []string, s *Selection) Decision {
	switch {
	case s.Namespace == podNamespace:
		return Decision{true, fmt.Sprintf("network %q is in the pod's own namespace", s.Ref())}
	case slices.Contains(globalNamespaces, s.Namespace):
		return Decision{true, fmt.Sprintf("network %q is in global namespace %q", s.Ref(), s.Namespace)}
	}
	return Decision{false, fmt.Sprintf(
		"namespace isolation: pod in namespace %q may not use network %q; allowed are the pod's own namespace and the global namespaces %q",
		podNamespace, s.Ref(), globalNamespaces)}
}
