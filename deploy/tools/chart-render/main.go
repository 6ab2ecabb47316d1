// chart-render: renders deploy/helm/otc-gateway the way `helm template` does,
// for machines without Helm (Helm is in neither Debian nor PyPI). It is the
// subset of Helm this chart uses: Go text/template with the sprig functions
// (the library Helm itself uses) plus Helm's include, tpl, required, toYaml,
// fromYaml, toJson, lookup; values merged like Helm's (numbers as float64,
// null deletes a key); manifests in Helm's install order.
//
// With Helm installed, deploy/check.sh uses `helm template` instead and
// compares the same way; the two agree on content, not on whitespace.
//
// Build (Debian: golang-go golang-github-masterminds-sprig-dev
// golang-gopkg-yaml.v2-dev golang-gopkg-yaml.v3-dev), GOPATH mode, offline:
//
//	GOPATH=/usr/share/gocode GO111MODULE=off go build -o chart-render ./deploy/tools/chart-render
//
// Use:
//
//	chart-render [--name RELEASE] [--namespace NS] [-f values.yaml]... [--notes] CHART_DIR
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yaml2 "gopkg.in/yaml.v2"
	yaml3 "gopkg.in/yaml.v3"
)

// Helm's install order (pkg/releaseutil/kind_sorter.go); other kinds go last.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret",
	"SecretList", "ConfigMap", "StorageClass", "PersistentVolume",
	"PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
	"ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role",
	"RoleList", "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod",
	"ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler",
	"StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
}

type capabilities struct {
	KubeVersion map[string]string
	APIVersions apiVersions
}

type apiVersions []string

// Has mirrors Helm's .Capabilities.APIVersions.Has: the built-in groups only.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type manifest struct {
	source string
	kind   string
	name   string
	body   string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "chart-render:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	release, namespace := "otc-gateway", "default"
	var valueFiles []string
	notes := false
	chartDir := ""
	for i := 0; i < len(args); i++ {
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", args[i])
			}
			i++
			return args[i], nil
		}
		var err error
		switch args[i] {
		case "--name":
			release, err = next()
		case "--namespace", "-n":
			namespace, err = next()
		case "-f", "--values":
			var f string
			f, err = next()
			valueFiles = append(valueFiles, f)
		case "--notes":
			notes = true
		default:
			if strings.HasPrefix(args[i], "-") || chartDir != "" {
				return fmt.Errorf("unexpected argument %q", args[i])
			}
			chartDir = args[i]
		}
		if err != nil {
			return err
		}
	}
	if chartDir == "" {
		return errors.New("usage: chart-render [--name RELEASE] [--namespace NS] [-f values.yaml]... [--notes] CHART_DIR")
	}

	chartMeta, err := readYAML(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	values, err := readYAML(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range valueFiles {
		override, err := readYAML(f)
		if err != nil {
			return err
		}
		values = mergeValues(values, override)
	}

	chart := map[string]interface{}{}
	for key, field := range map[string]string{
		"name": "Name", "version": "Version", "appVersion": "AppVersion",
		"description": "Description", "type": "Type", "apiVersion": "APIVersion",
		"kubeVersion": "KubeVersion", "keywords": "Keywords",
	} {
		if v, ok := chartMeta[key]; ok {
			chart[field] = v
		}
	}
	chartName, _ := chart["Name"].(string)

	top := map[string]interface{}{
		"Values": values,
		"Chart":  chart,
		"Release": map[string]interface{}{
			"Name": release, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Capabilities": capabilities{
			KubeVersion: map[string]string{"Version": "v1.30.0", "Major": "1", "Minor": "30"},
			APIVersions: apiVersions{"v1", "apps/v1", "autoscaling/v2", "policy/v1"},
		},
		"Template": map[string]interface{}{"BasePath": chartName + "/templates"},
	}

	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	root := template.New("chart").Option("missingkey=zero")
	root.Funcs(funcMap(root))
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		name := chartName + "/templates/" + filepath.Base(f)
		if _, err := root.New(name).Parse(string(text)); err != nil {
			return err
		}
	}

	var manifests []manifest
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasPrefix(base, "_") {
			continue
		}
		name := chartName + "/templates/" + base
		isNotes := base == "NOTES.txt"
		if isNotes != notes {
			continue
		}
		var out bytes.Buffer
		if err := root.ExecuteTemplate(&out, name, top); err != nil {
			return err
		}
		text := strings.ReplaceAll(out.String(), "<no value>", "")
		if isNotes {
			fmt.Print(text)
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		// One file may hold several documents.
		for _, doc := range strings.Split(text, "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var head struct {
				Kind     string `yaml:"kind"`
				Metadata struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
			}
			if err := yaml3.Unmarshal([]byte(doc), &head); err != nil {
				return fmt.Errorf("%s renders invalid YAML: %v\n%s", name, err, doc)
			}
			manifests = append(manifests, manifest{source: name, kind: head.Kind, name: head.Metadata.Name, body: strings.Trim(doc, "\n")})
		}
	}
	if notes {
		return nil
	}
	rank := func(kind string) int {
		for i, k := range installOrder {
			if k == kind {
				return i
			}
		}
		return len(installOrder)
	}
	sort.SliceStable(manifests, func(i, j int) bool {
		ri, rj := rank(manifests[i].kind), rank(manifests[j].kind)
		if ri != rj {
			return ri < rj
		}
		if manifests[i].kind != manifests[j].kind {
			return manifests[i].kind < manifests[j].kind
		}
		return manifests[i].name < manifests[j].name
	})
	for _, m := range manifests {
		fmt.Printf("---\n# Source: %s\n%s\n", m.source, m.body)
	}
	return nil
}

// funcMap: sprig's text functions (less env and expandenv, as in Helm) plus Helm's own.
func funcMap(root *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = func(v interface{}) string {
		data, err := yaml2.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	f["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml3.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		clone, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	return f
}

func readYAML(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v map[string]interface{}
	if err := yaml3.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if v == nil {
		v = map[string]interface{}{}
	}
	return normalize(v).(map[string]interface{}), nil
}

// normalize makes values look as they do in Helm, which reads them through
// JSON: every number a float64, every map a map[string]interface{}.
func normalize(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case []interface{}:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	default:
		return v
	}
}

// mergeValues: override wins; maps merge key by key; a null deletes the key.
func mergeValues(base, override map[string]interface{}) map[string]interface{} {
	for k, v := range override {
		if v == nil {
			delete(base, k)
			continue
		}
		if bm, ok := base[k].(map[string]interface{}); ok {
			if om, ok := v.(map[string]interface{}); ok {
				base[k] = mergeValues(bm, om)
				continue
			}
		}
		base[k] = v
	}
	return base
}
