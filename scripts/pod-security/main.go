// pod-security checks rendered Kubernetes objects against a Pod Security Standards level with the
// evaluator the API server's PodSecurity admission runs (k8s.io/pod-security-admission): every pod,
// and every pod template of a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob.
//
//	pod-security [-level restricted] [-version latest] < objects.yaml
//
// Prints one line per pod that breaks the level ("Kind/name: check: detail") and exits 1 if any
// does, 0 otherwise (2 on unreadable input).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// pod is what the evaluator reads of an object that makes pods.
type pod struct {
	ref  string
	meta *metav1.ObjectMeta
	spec *corev1.PodSpec
}

func podOf(doc []byte) (*pod, error) {
	var head metav1.TypeMeta
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	ref := head.Kind + "/" + meta.Metadata.Name
	template := func(t *corev1.PodTemplateSpec) *pod { return &pod{ref, &t.ObjectMeta, &t.Spec} }
	switch head.Kind {
	case "Pod":
		var o corev1.Pod
		err := yaml.UnmarshalStrict(doc, &o)
		return &pod{ref, &o.ObjectMeta, &o.Spec}, err
	case "Deployment":
		var o appsv1.Deployment
		err := yaml.UnmarshalStrict(doc, &o)
		return template(&o.Spec.Template), err
	case "StatefulSet":
		var o appsv1.StatefulSet
		err := yaml.UnmarshalStrict(doc, &o)
		return template(&o.Spec.Template), err
	case "DaemonSet":
		var o appsv1.DaemonSet
		err := yaml.UnmarshalStrict(doc, &o)
		return template(&o.Spec.Template), err
	case "ReplicaSet":
		var o appsv1.ReplicaSet
		err := yaml.UnmarshalStrict(doc, &o)
		return template(&o.Spec.Template), err
	case "Job":
		var o batchv1.Job
		err := yaml.UnmarshalStrict(doc, &o)
		return template(&o.Spec.Template), err
	case "CronJob":
		var o batchv1.CronJob
		err := yaml.UnmarshalStrict(doc, &o)
		return template(&o.Spec.JobTemplate.Spec.Template), err
	}
	return nil, nil
}

func main() {
	level := flag.String("level", "restricted", "the Pod Security Standards level: privileged, baseline or restricted")
	version := flag.String("version", "latest", "the level's version, e.g. v1.30, or latest")
	flag.Parse()
	lv, err := api.ParseLevel(*level)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pod-security:", err)
		os.Exit(2)
	}
	v, err := api.ParseVersion(*version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pod-security:", err)
		os.Exit(2)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pod-security:", err)
		os.Exit(2)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	pods, broken := 0, 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "pod-security:", err)
			os.Exit(2)
		}
		p, err := podOf(doc)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pod-security:", err)
			os.Exit(2)
		}
		if p == nil {
			continue
		}
		pods++
		for _, r := range evaluator.EvaluatePod(api.LevelVersion{Level: lv, Version: v}, p.meta, p.spec) {
			if !r.Allowed {
				broken++
				fmt.Printf("%s: %s: %s\n", p.ref, r.ForbiddenReason, r.ForbiddenDetail)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "pod-security: %d pods checked against %s:%s, %d findings\n", pods, *level, *version, broken)
	if broken > 0 {
		os.Exit(1)
	}
}
