package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
)

// Generic object verbs for callers that keep their own object types
// (cluster-ipam): a REST path in, JSON out, with the apiserver's
// preconditions. Paths are absolute ("/apis/<group>/<version>/...").

// Patch types.
const (
	MergePatch = "application/merge-patch+json"
	JSONPatch  = "application/json-patch+json"
)

// Get reads one object into out; cached reads the apiserver's watch cache
// (see GetPod for what that trades).
func (c *Client) Get(ctx context.Context, path string, cached bool, out any) error {
	if cached {
		path += fromCache
	}
	return c.do(ctx, http.MethodGet, path, "", nil, out)
}

// Create POSTs obj to a collection and decodes the stored object into out
// (nil: discarded). An existing object of that name is a 409 with reason
// AlreadyExists (IsAlreadyExists): the apiserver's create-if-absent.
func (c *Client) Create(ctx context.Context, collection string, obj, out any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, collection, "application/json", body, out)
}

// Update PUTs obj; its metadata.resourceVersion makes it conditional (a 409
// Conflict when the object changed since it was read).
func (c *Client) Update(ctx context.Context, path string, obj, out any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, path, "application/json", body, out)
}

// Patch sends a patch of patchType (MergePatch or JSONPatch). A merge patch
// carrying metadata.resourceVersion is conditional like Update.
func (c *Client) Patch(ctx context.Context, path, patchType string, patch, out any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPatch, path, patchType, body, out)
}

// Delete deletes one object if it still has the given UID and
// resourceVersion (either may be empty: not checked). A failed precondition
// is a 409 Conflict; a missing object a 404.
func (c *Client) Delete(ctx context.Context, path, uid, resourceVersion string) error {
	pre := map[string]string{}
	if uid != "" {
		pre["uid"] = uid
	}
	if resourceVersion != "" {
		pre["resourceVersion"] = resourceVersion
	}
	body, err := json.Marshal(map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": pre})
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, path, "application/json", body, nil)
}

// ListOptions select what List returns.
type ListOptions struct {
	// LabelSelector is a Kubernetes label selector ("a=b,c").
	LabelSelector string
	// Cached serves the list from the watch cache (resourceVersion=0):
	// cheap, possibly a few milliseconds old. Otherwise the list is a
	// quorum read, fetched in pages of PageSize.
	Cached   bool
	PageSize int
}

// List returns the raw items of a collection and the list's
// resourceVersion.
func (c *Client) List(ctx context.Context, collection string, o ListOptions) ([]json.RawMessage, string, error) {
	var items []json.RawMessage
	cont := ""
	for {
		q := url.Values{}
		if o.LabelSelector != "" {
			q.Set("labelSelector", o.LabelSelector)
		}
		if o.Cached {
			q.Set("resourceVersion", "0")
		} else {
			size := o.PageSize
			if size <= 0 {
				size = 500
			}
			q.Set("limit", strconv.Itoa(size))
			if cont != "" {
				q.Set("continue", cont)
			}
		}
		var page struct {
			Metadata ListMetaRV        `json:"metadata"`
			Items    []json.RawMessage `json:"items"`
		}
		if err := c.do(ctx, http.MethodGet, collection+"?"+q.Encode(), "", nil, &page); err != nil {
			return nil, "", err
		}
		items = append(items, page.Items...)
		if o.Cached || page.Metadata.Continue == "" {
			return items, page.Metadata.ResourceVersion, nil
		}
		cont = page.Metadata.Continue
	}
}

// ListMetaRV is a list's metadata.
type ListMetaRV struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Continue        string `json:"continue,omitempty"`
}

// IsAlreadyExists reports a create refused because the name is taken.
func IsAlreadyExists(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusConflict && se.Reason == "AlreadyExists"
}

// IsTransient reports an error worth retrying: no answer (connection
// refused or reset, timeout) or an answer saying "later" (429, 500, 502,
// 503, 504). A request without an answer may still have been carried out.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	// http.Client.Do reports every failure to get an answer (refused,
	// reset, EOF, timeout) as a *url.Error; c.do wraps it.
	var ue *url.Error
	return errors.As(err, &ue) && !errors.Is(err, context.Canceled)
}
