package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// loadConfFile reads one .conf/.conflist/.json file (a conflist when it has
// "plugins").
func loadConfFile(path string) (*spec.ConfList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "read %s: %v", path, err)
	}
	l, err := spec.ParseAny(data)
	if err != nil {
		ce := spec.AsError(err, spec.ErrInvalidNetworkConfig)
		return nil, &spec.Error{Code: ce.Code, Msg: path + ": " + ce.Msg, Details: ce.Details}
	}
	return l, nil
}

// firstConfFile returns the first configuration file of dir in name order
// (what Multus does with a directory clusterNetwork), skipping our own
// configuration (confFiles) so that pointing at kubelet's directory works.
func firstConfFile(dir string) (string, error) {
	others, _, err := confFiles(dir)
	if err != nil {
		return "", err
	}
	if len(others) == 0 {
		return "", fmt.Errorf("no .conf, .conflist or .json file in %s", dir)
	}
	return others[0], nil
}

// isMultinet: the thin plugin's or the thick shim's configuration (the
// daemon resolving a directory must not pick the shim's conflist either).
func isMultinet(l *spec.ConfList) bool {
	for _, p := range l.Plugins {
		if p.Network.Type == "multinet" || p.Network.Type == "multinet-shim" {
			return true
		}
	}
	return false
}

// clusterFromDisk resolves clusterNetwork without the apiserver: a file or
// directory path, or a network name in confDir. found is false when the
// value is a name that confDir does not define (it may be a
// NetworkAttachmentDefinition).
func clusterFromDisk(c *Config) (l *spec.ConfList, found bool, err error) {
	cn := c.ClusterNetwork
	if filepath.IsAbs(cn) {
		st, err := os.Stat(cn)
		if err != nil {
			return nil, true, spec.Errorf(spec.ErrTryAgainLater, "clusterNetwork %s: %v", cn, err)
		}
		file := cn
		if st.IsDir() {
			if file, err = firstConfFile(cn); err != nil {
				return nil, true, spec.Errorf(spec.ErrTryAgainLater, "clusterNetwork: %v", err)
			}
		}
		l, err := loadConfFile(file)
		return l, true, err
	}
	if strings.Contains(cn, "/") { // ns/name: a NetworkAttachmentDefinition
		return nil, false, nil
	}
	l, err = runtime.LoadNetwork(c.ConfDir, cn)
	var nf *runtime.NotFoundError
	if errors.As(err, &nf) {
		return nil, false, nil
	}
	return l, true, err
}

// nadConfig applies §3.4.1: spec.config, else an on-disk .conflist named
// like the object, else an on-disk .conf, else failure.
func nadConfig(c *Config, nad *api.NetworkAttachmentDefinition) (*spec.ConfList, error) {
	l, err := api.ParseConfig(nad)
	if err != nil || l != nil {
		return l, err
	}
	ref := nad.Metadata.Namespace + "/" + nad.Metadata.Name
	l, err = runtime.LoadNetwork(c.ConfDir, nad.Metadata.Name)
	var nf *runtime.NotFoundError
	if errors.As(err, &nf) {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig,
			"NetworkAttachmentDefinition %s has no spec.config and %s has no .conflist or .conf file whose \"name\" is %q (multi-net spec §3.4.1)",
			ref, c.ConfDir, nad.Metadata.Name)
	}
	if err != nil {
		ce := spec.AsError(err, spec.ErrInvalidNetworkConfig)
		return nil, &spec.Error{Code: ce.Code, Msg: "NetworkAttachmentDefinition " + ref + ": " + ce.Msg, Details: ce.Details}
	}
	return l, nil
}

// selfContained renders a list as conflist bytes with every plugin inlined,
// each plugin's bytes passed through edit (the cni-args merge).
func selfContained(l *spec.ConfList, edit func([]byte) ([]byte, error)) ([]byte, error) {
	m := map[string]any{"name": l.Name}
	if l.CNIVersion != "" {
		m["cniVersion"] = l.CNIVersion
	}
	if len(l.CNIVersions) > 0 {
		m["cniVersions"] = l.CNIVersions
	}
	if l.DisableCheck {
		m["disableCheck"] = true
	}
	if l.DisableGC {
		m["disableGC"] = true
	}
	m["loadOnlyInlinedPlugins"] = true
	plugins := make([]json.RawMessage, 0, len(l.Plugins))
	for _, p := range l.Plugins {
		b := p.Bytes
		if edit != nil {
			var err error
			if b, err = edit(b); err != nil {
				return nil, err
			}
		}
		plugins = append(plugins, b)
	}
	m["plugins"] = plugins
	return json.Marshal(m)
}
