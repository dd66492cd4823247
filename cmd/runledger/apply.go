package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/jobspec"
)

type applyFlags struct {
	api    apiFlags
	files  []string
	dryRun bool
	prune  bool
	yes    bool
}

func newApplyCmd() *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply -f FILE_OR_DIR... [--dry-run] [--prune [--yes]]",
		Short: "Make the jobs what YAML or JSON files define: create, update, and with --prune delete",
		Long: `apply reads job definitions from files (.yaml, .yml or .json; a folder is
read with its subfolders; a YAML file may hold several jobs separated by
---), each in the shape of POST /v1/jobs, and makes the API's jobs match:
it creates the jobs that do not exist, updates those that differ (with
If-Match, so a concurrent change is refused, not overwritten), leaves the
others, and with --prune deletes the jobs no file defines.

Every file is checked first, by the API's own rules and then by the API
itself without writing (POST /v1/jobs?dry_run=true: its pools, its clock);
an invalid one is reported with its name, the field and the API's error
code, and nothing is written. The plan is printed
as a diff (create / update / unchanged / delete); --dry-run stops there.

--prune refuses to run when the files hold no definition at all (it would
delete every job), and asks for --yes when it would delete more than 3
jobs or more than a third of them; --dry-run shows that plan without it.`,
		Example: `  runledger apply -f jobs/
  runledger apply -f etl.yaml -f report.json --dry-run
  runledger apply -f jobs/ --prune
  runledger apply -f jobs/ --prune --yes   # deletes many jobs`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runApply(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.files, "file", "f", nil, "a job file, or a folder of them; repeatable (required)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan and write nothing")
	fl.BoolVar(&f.prune, "prune", false, "also delete the jobs that no file defines")
	fl.BoolVar(&f.yes, "yes", false, fmt.Sprintf("confirm a --prune that deletes more than %d jobs or more than a third of them", pruneConfirmCount))
	f.api.register(fl)
	return cmd
}

// jobFile is one job definition read from a file.
type jobFile struct {
	source string          // file name, with "#n" for the n-th document of several
	body   json.RawMessage // the definition as JSON, sent as it is
	job    jobspec.Job     // the definition checked, every default filled in
}

// change is one line of the plan.
type change struct {
	Action string   `json:"action"` // create, update, unchanged, delete
	Job    string   `json:"job"`
	Source string   `json:"file,omitempty"`
	Fields []string `json:"fields,omitempty"` // the top-level fields an update changes
	Error  string   `json:"error,omitempty"`

	version int64
	body    json.RawMessage
}

func runApply(cmd *cobra.Command, f applyFlags) error {
	if len(f.files) == 0 {
		return usageErrorf("apply needs -f FILE_OR_DIR")
	}
	if err := f.api.checkOutput(); err != nil {
		return err
	}
	defs, problems := readJobFiles(f.files)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(cmd.ErrOrStderr(), p)
		}
		return fmt.Errorf("%d invalid job file(s); nothing was written", len(problems))
	}
	if f.prune && len(defs) == 0 {
		return fmt.Errorf("--prune with no job definition read from %s would delete every job; nothing was written",
			strings.Join(f.files, ", "))
	}
	c, err := f.api.client(cmd)
	if err != nil {
		return err
	}
	if problems, err := validateOnServer(cmd, c, defs); err != nil {
		return err
	} else if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(cmd.ErrOrStderr(), p)
		}
		return fmt.Errorf("%d job file(s) refused by the API; nothing was written", len(problems))
	}
	current, err := allJobs(cmd, c)
	if err != nil {
		return err
	}
	plan, err := planApply(defs, current, f.prune)
	if err != nil {
		return err
	}
	if f.dryRun {
		return printPlan(cmd.OutOrStdout(), plan, f.api.json(), true)
	}
	if err := confirmPrune(plan, len(current), f.yes); err != nil {
		return err
	}
	failed := 0
	for i := range plan {
		if err := applyChange(cmd, c, &plan[i]); err != nil {
			plan[i].Error = describe(err)
			failed++
		}
	}
	if err := printPlan(cmd.OutOrStdout(), plan, f.api.json(), false); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of the changes failed", failed)
	}
	return nil
}

// readJobFiles reads and checks every definition; problems name the file,
// the field and the code, as the API would refuse them.
func readJobFiles(paths []string) ([]jobFile, []string) {
	var files []string
	var problems []string
	for _, p := range paths {
		found, err := jobFilesAt(p)
		if err != nil {
			problems = append(problems, err.Error())
		}
		files = append(files, found...)
	}
	var defs []jobFile
	seen := map[string]string{}
	for _, name := range files {
		docs, err := readDocuments(name)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, d := range docs {
			j, err := jobspec.Load(d.body)
			if err != nil {
				problems = append(problems, fileProblem(d.source, err))
				continue
			}
			if prev, dup := seen[j.Name]; dup {
				problems = append(problems, fmt.Sprintf("%s: name: invalid_field: job %q is also defined in %s", d.source, j.Name, prev))
				continue
			}
			seen[j.Name] = d.source
			d.job = j
			defs = append(defs, d)
		}
	}
	if len(files) == 0 && len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("no .yaml, .yml or .json file in %s", strings.Join(paths, ", ")))
	}
	return defs, problems
}

// validateOnServer asks the API to check each definition without writing
// it (what only the deployment knows: its pools, its clock). A refusal is
// a problem of that file; any other error stops the apply.
func validateOnServer(cmd *cobra.Command, c *client.Client, defs []jobFile) ([]string, error) {
	var problems []string
	for _, d := range defs {
		_, err := c.ValidateJob(cmd.Context(), d.body)
		var apiErr *client.Error
		switch {
		case err == nil:
		case errors.As(err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500 && apiErr.Code != "" &&
			apiErr.Code != client.CodeUnauthorized:
			problems = append(problems, fmt.Sprintf("%s: %s: %s", d.source, apiErr.Code, apiErr.Message))
		default:
			return nil, err
		}
	}
	return problems, nil
}

// fileProblem is a refused definition as "file: field: code: sentence".
func fileProblem(source string, err error) string {
	var je *jobspec.Error
	if errors.As(err, &je) {
		field := je.Field
		if field == "" {
			field = "(body)"
		}
		return fmt.Sprintf("%s: %s: %s: %s", source, field, je.Code, je.Message)
	}
	return fmt.Sprintf("%s: %v", source, err)
}

// jobFilesAt is the file, or the job files under the folder, sorted.
func jobFilesAt(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var out []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				out = append(out, p)
			}
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readDocuments reads a file's definitions as JSON: a JSON file is one;
// a YAML file holds one per document.
func readDocuments(name string) ([]jobFile, error) {
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(filepath.Ext(name), ".json") {
		return []jobFile{{source: name, body: raw}}, nil
	}
	parts := documentSeparator.Split(string(raw), -1)
	var docs []jobFile
	for i, p := range parts {
		if strings.TrimSpace(stripComments(p)) == "" {
			continue
		}
		body, err := yaml.YAMLToJSON([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("%s: (body): invalid_json: not valid YAML: %v", name, err)
		}
		source := name
		if len(parts) > 1 {
			source = fmt.Sprintf("%s#%d", name, i+1)
		}
		docs = append(docs, jobFile{source: source, body: body})
	}
	return docs, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// planApply compares the files with the API's jobs.
func planApply(defs []jobFile, current []client.Job, prune bool) ([]change, error) {
	byName := map[string]client.Job{}
	for _, j := range current {
		byName[j.Job.Name] = j
	}
	var plan []change
	defined := map[string]bool{}
	for _, d := range defs {
		defined[d.job.Name] = true
		have, ok := byName[d.job.Name]
		if !ok {
			plan = append(plan, change{Action: "create", Job: d.job.Name, Source: d.source, body: d.body})
			continue
		}
		fields, err := changedFields(have.Job, d.job)
		if err != nil {
			return nil, err
		}
		if len(fields) == 0 {
			plan = append(plan, change{Action: "unchanged", Job: d.job.Name, Source: d.source})
			continue
		}
		plan = append(plan, change{Action: "update", Job: d.job.Name, Source: d.source, Fields: fields, version: have.Version, body: d.body})
	}
	if prune {
		for _, j := range current {
			if !defined[j.Job.Name] {
				plan = append(plan, change{Action: "delete", Job: j.Job.Name})
			}
		}
	}
	return plan, nil
}

// pruneConfirmCount is the number of deletions a --prune makes without
// --yes (and never more than a third of the jobs).
const pruneConfirmCount = 3

// confirmPrune refuses a plan that deletes more than pruneConfirmCount jobs
// or more than a third of the total jobs, unless the command line says --yes:
// a folder read by mistake must not empty the deployment.
func confirmPrune(plan []change, total int, yes bool) error {
	deletes := 0
	for _, ch := range plan {
		if ch.Action == "delete" {
			deletes++
		}
	}
	if yes || deletes == 0 || (deletes <= pruneConfirmCount && 3*deletes <= total) {
		return nil
	}
	return fmt.Errorf("--prune would delete %d of the %d jobs: see them with --dry-run, confirm with --yes; nothing was written",
		deletes, total)
}

// changedFields compares two definitions in their canonical JSON (every
// default explicit) and names the top-level fields that differ.
func changedFields(have, want jobspec.Job) ([]string, error) {
	a, err := canonicalFields(have)
	if err != nil {
		return nil, err
	}
	b, err := canonicalFields(want)
	if err != nil {
		return nil, err
	}
	var out []string
	for k, v := range b {
		if !bytes.Equal(a[k], v) {
			out = append(out, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

func canonicalFields(j jobspec.Job) (map[string]json.RawMessage, error) {
	raw, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encode job %s: %w", j.Name, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("encode job %s: %w", j.Name, err)
	}
	return m, nil
}

func applyChange(cmd *cobra.Command, c *client.Client, ch *change) error {
	ctx := cmd.Context()
	switch ch.Action {
	case "create":
		_, err := c.CreateJob(ctx, ch.body)
		return err
	case "update":
		_, err := c.UpdateJob(ctx, ch.Job, ch.version, ch.body)
		return err
	case "delete":
		return c.DeleteJob(ctx, ch.Job)
	}
	return nil
}

// printPlan prints the diff: one line per job, its action first.
func printPlan(w io.Writer, plan []change, asJSON, dryRun bool) error {
	if asJSON {
		return printJSON(w, map[string]any{"dry_run": dryRun, "changes": plan})
	}
	marks := map[string]string{"create": "+", "update": "~", "unchanged": "=", "delete": "-"}
	t := newTable(w, "", "ACTION", "JOB", "FROM", "DETAIL")
	counts := map[string]int{}
	for _, ch := range plan {
		counts[ch.Action]++
		d := ""
		if len(ch.Fields) > 0 {
			d = "changes " + strings.Join(ch.Fields, ", ")
		}
		if ch.Error != "" {
			d = "FAILED: " + ch.Error
		}
		src := ch.Source
		if src == "" {
			src = "-"
		}
		t.row(marks[ch.Action], ch.Action, ch.Job, src, d)
	}
	if err := t.flush(); err != nil {
		return err
	}
	summary := fmt.Sprintf("%d to create, %d to update, %d unchanged, %d to delete",
		counts["create"], counts["update"], counts["unchanged"], counts["delete"])
	if dryRun {
		summary += " (dry run: nothing written)"
	}
	_, err := fmt.Fprintln(w, summary)
	return err
}
