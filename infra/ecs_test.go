package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// statementsOf lists the IAM statements of the policies on a function's role.
func (s *synthesized) statementsOf(function string) []map[string]any {
	roleID := ref(s.resources[s.functions[function]].Properties["Role"])
	var out []map[string]any
	for _, r := range s.ofType("AWS::IAM::Policy") {
		roles, _ := r.Properties["Roles"].([]any)
		if slices.ContainsFunc(roles, func(v any) bool { return ref(v) == roleID }) {
			collectStatements("", r.Properties["PolicyDocument"], &out)
		}
	}
	return out
}

// render writes a template value as text: Fn::Join joined, pseudo
// parameters as ${Name}.
func render(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if id, ok := v["Ref"].(string); ok {
			return "${" + strings.TrimPrefix(id, "AWS::") + "}"
		}
		if j, ok := v["Fn::Join"].([]any); ok && len(j) == 2 {
			parts, _ := j[1].([]any)
			var out []string
			for _, p := range parts {
				out = append(out, render(p))
			}
			return strings.Join(out, j[0].(string))
		}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, render(x))
		}
		return "[" + strings.Join(out, " ") + "]"
	}
	return fmt.Sprint(v)
}

func renderList(v any) []string {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	var out []string
	for _, x := range list {
		out = append(out, render(x))
	}
	slices.Sort(out)
	return out
}

// withAction finds the statements that allow action.
func withAction(sts []map[string]any, action string) []map[string]any {
	var out []map[string]any
	for _, st := range sts {
		if st["Effect"] == "Allow" && slices.Contains(strings1(st["Action"]), action) {
			out = append(out, st)
		}
	}
	return out
}

// The ecs executor's grants name exactly the allowed task definitions
// (any revision), only on the allowed clusters, pass only their roles and
// only to ECS tasks, and observe and stop only the allowed clusters' tasks;
// a stack without ECS props grants no ECS or PassRole action at all.
func TestECSGrants(t *testing.T) {
	t.Parallel()
	const arn = "arn:${Partition}:ecs:${Region}:${AccountId}:"
	wantDefs := []string{arn + "task-definition/etl:*", arn + "task-definition/report:*"}
	wantClusters := []string{arn + "cluster/batch", arn + "cluster/gpu"}
	wantTasks := []string{arn + "task/batch/*", arn + "task/gpu/*"}
	wantRoles := []string{"arn:aws:iam::123456789012:role/ecs-exec", "arn:aws:iam::123456789012:role/etl-task"}
	for _, fn := range []string{"api", "events", "ticker", "reconciler", "worker"} {
		sts := full.statementsOf(fn)
		if len(sts) == 0 {
			t.Fatalf("%s: no statements found", fn)
		}
		run, pass, observe := withAction(sts, "ecs:RunTask"), withAction(sts, "iam:PassRole"), withAction(sts, "ecs:DescribeTasks")
		if fn == "worker" {
			if len(run)+len(pass)+len(observe) != 0 {
				t.Errorf("worker: ECS grants %v %v %v, want none", run, pass, observe)
			}
			continue
		}
		if len(run) != 1 || !reflect.DeepEqual(strings1(run[0]["Action"]), []string{"ecs:RunTask"}) ||
			!reflect.DeepEqual(renderList(run[0]["Resource"]), wantDefs) {
			t.Errorf("%s: RunTask statements %v, want one on %v", fn, run, wantDefs)
		} else {
			cond, _ := run[0]["Condition"].(map[string]any)
			eq, _ := cond["ArnEquals"].(map[string]any)
			if got := renderList(eq["ecs:cluster"]); !reflect.DeepEqual(got, wantClusters) || len(cond) != 1 {
				t.Errorf("%s: RunTask condition %v, want ArnEquals ecs:cluster %v", fn, cond, wantClusters)
			}
		}
		if len(pass) != 1 || !reflect.DeepEqual(renderList(pass[0]["Resource"]), wantRoles) ||
			!reflect.DeepEqual(pass[0]["Condition"], map[string]any{"StringEquals": map[string]any{"iam:PassedToService": "ecs-tasks.amazonaws.com"}}) {
			t.Errorf("%s: PassRole statements %v, want one on %v passed to ecs-tasks only", fn, pass, wantRoles)
		}
		// The functions that settle due timers (a cancel's timeout, a
		// LOST attempt's evidence) observe and stop tasks; the api does not.
		observer := fn != "api"
		switch {
		case observer && (len(observe) != 1 || !reflect.DeepEqual(strings1(observe[0]["Action"]), []string{"ecs:DescribeTasks", "ecs:StopTask"}) ||
			!reflect.DeepEqual(renderList(observe[0]["Resource"]), wantTasks)):
			t.Errorf("%s: DescribeTasks statements %v, want one with StopTask on %v", fn, observe, wantTasks)
		case !observer && len(observe) != 0:
			t.Errorf("%s: DescribeTasks granted, want only the functions that settle due timers", fn)
		}
		env, _ := full.resources[full.functions[fn]].Properties["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		if vars["RUNLEDGER_EXECUTORS_ALLOWED"] != `{"ecs_clusters":["batch","gpu"],"ecs_task_definitions":["etl","report"],`+
			`"lambda_functions":["etl-fn","arn:aws:lambda:eu-west-1:123456789012:function:report:live"]}` || vars["RUNLEDGER_API_URL"] == nil {
			t.Errorf("%s: environment %v, want the ECS allow-lists and the API URL", fn, vars)
		}
	}
	for fn := range jwt.functions {
		for _, st := range jwt.statementsOf(fn) {
			for _, a := range strings1(st["Action"]) {
				if strings.HasPrefix(a, "ecs:") || a == "iam:PassRole" {
					t.Errorf("Jwt stack (no ECS props), %s: grants %s", fn, a)
				}
			}
		}
	}
}
