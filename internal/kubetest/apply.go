package kubetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// InstallCRDs creates the CustomResourceDefinitions in the YAML files
// (one object each, as deploy/crds holds them; existing ones are kept),
// waits until they are established, and then waits out the apiserver's
// 2-second delay for creates of a kind established just now. Other kinds in the
// files are skipped.
func (c *Cluster) InstallCRDs(files ...string) error {
	var names []string
	for _, f := range files {
		y, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		j, err := yaml.YAMLToJSON(y)
		if err != nil {
			return fmt.Errorf("%s: %v", f, err)
		}
		var m objectMeta
		if err := json.Unmarshal(j, &m); err != nil || m.Kind != "CustomResourceDefinition" {
			continue
		}
		if _, err := c.Create(j); err != nil && !IsStatus(err, http.StatusConflict) {
			return fmt.Errorf("%s: %v", f, err)
		}
		names = append(names, m.Metadata.Name)
	}
	fresh := false
	for _, n := range names {
		c.crdMu.Lock()
		seen := c.crds[n]
		c.crdMu.Unlock()
		if seen {
			continue
		}
		if err := c.WaitCRDEstablished(n, 30*time.Second); err != nil {
			return err
		}
		fresh = true
		c.crdMu.Lock()
		if c.crds == nil {
			c.crds = map[string]bool{}
		}
		c.crds[n] = true
		c.crdMu.Unlock()
	}
	if fresh {
		time.Sleep(2 * time.Second)
	}
	return nil
}

// BindPlainUser applies the ClusterRoles of an RBAC manifest (documents
// separated by "---"; other kinds are skipped) and binds the one named role
// to PlainUser, so a test acting with UserToken has exactly those rights.
func (c *Cluster) BindPlainUser(rbacFile, role string) error {
	y, err := os.ReadFile(rbacFile)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(y), "\n---\n") {
		if !strings.Contains(doc, "kind: ClusterRole\n") {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return fmt.Errorf("%s: %v", rbacFile, err)
		}
		if _, err := c.Apply(j); err != nil {
			return err
		}
	}
	binding := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": role + "-test-user"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": PlainUser}}}
	_, err = c.Apply(binding)
	return err
}
