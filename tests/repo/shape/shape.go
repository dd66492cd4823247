// Package shape measures the code's shape from its sources alone (go/ast,
// no type checking): the figures the kernel's reshape is judged by, so a
// test can keep them and a closing note can quote them before and after.
package shape

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Figures are one measurement of the module.
type Figures struct {
	// LargestType is the type with the most methods and their count.
	LargestType    string
	LargestMethods int
	// FileArrows counts, in the package with the most files that refer to
	// one another, the file-to-file references (a file using a top-level
	// name another file of its package declares); BackArrows those that
	// lie on a cycle of files (the file refers, through others, back to
	// itself): a tangle that no order of the files reads top-down.
	TangledPackage string
	FileArrows     int
	BackArrows     int
	// MutableVars are the package-level variables outside tests that are
	// not sentinel errors, compiled patterns or interface assertions.
	MutableVars []string
	// UpdateLoops are the loops that retry on a version conflict (a loop
	// body that names ErrVersionConflict): read-decide-write loops.
	UpdateLoops []string
	// SchedulerJobspecLoads are the calls of jobspec.Load in the
	// scheduler's package and the packages under it (its rooms).
	SchedulerJobspecLoads []string
	// Rooms are the packages under shared/scheduler/, the kernel's rooms;
	// RoomBackImports their imports that run back up: of the kernel
	// (shared/scheduler), of a package that imports the kernel (its
	// callers: the API, the composition root...), or of another room.
	Rooms           []string
	RoomBackImports []string
}

// String is the figures as a closing note quotes them.
func (f Figures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "largest type: %s, %d methods\n", f.LargestType, f.LargestMethods)
	fmt.Fprintf(&b, "most tangled package: %s, %d file-to-file arrows, %d on a cycle\n", f.TangledPackage, f.FileArrows, f.BackArrows)
	fmt.Fprintf(&b, "package-level mutable variables: %d %v\n", len(f.MutableVars), f.MutableVars)
	fmt.Fprintf(&b, "read-decide-write loops: %d %v\n", len(f.UpdateLoops), f.UpdateLoops)
	fmt.Fprintf(&b, "jobspec.Load calls in the scheduler: %d %v\n", len(f.SchedulerJobspecLoads), f.SchedulerJobspecLoads)
	fmt.Fprintf(&b, "rooms: %d %v; imports from a room back up: %d %v\n", len(f.Rooms), f.Rooms, len(f.RoomBackImports), f.RoomBackImports)
	return b.String()
}

// pkg is one directory's non-test Go files, parsed.
type pkg struct {
	dir   string
	files map[string]*ast.File
}

// Measure reads the module at root (its infra/ module, node_modules and
// hidden directories left out).
func Measure(root string) (Figures, error) {
	fset := token.NewFileSet()
	pkgs, err := parseAll(fset, root)
	if err != nil {
		return Figures{}, err
	}
	var f Figures
	for _, p := range pkgs {
		methodsOf(p, &f)
		arrows, back := tangle(p)
		if back > f.BackArrows || (back == f.BackArrows && arrows > f.FileArrows) {
			f.TangledPackage, f.FileArrows, f.BackArrows = p.dir, arrows, back
		}
		f.MutableVars = append(f.MutableVars, mutableVars(p)...)
		f.UpdateLoops = append(f.UpdateLoops, updateLoops(fset, p)...)
		if p.dir == "shared/scheduler" || strings.HasPrefix(p.dir, "shared/scheduler/") {
			f.SchedulerJobspecLoads = append(f.SchedulerJobspecLoads, calls(fset, p, "jobspec", "Load")...)
		}
	}
	f.Rooms, f.RoomBackImports = roomImports(pkgs)
	return f, nil
}

// kernelDir is the kernel's package; the packages under it are its rooms.
const kernelDir = "shared/scheduler"

// roomImports lists the rooms and their imports that run back up.
func roomImports(pkgs []pkg) (rooms, back []string) {
	imports := map[string][]string{} // dir -> the module's dirs it imports
	for _, p := range pkgs {
		for _, file := range p.files {
			for _, spec := range file.Imports {
				path := strings.Trim(spec.Path.Value, `"`)
				for _, q := range pkgs {
					if path == q.dir || strings.HasSuffix(path, "/"+q.dir) {
						imports[p.dir] = append(imports[p.dir], q.dir)
					}
				}
			}
		}
	}
	callers := map[string]bool{kernelDir: true}
	for dir, to := range imports {
		if slices.Contains(to, kernelDir) && !isRoom(dir) {
			callers[dir] = true
		}
	}
	for _, p := range pkgs {
		if !isRoom(p.dir) {
			continue
		}
		rooms = append(rooms, p.dir)
		seen := map[string]bool{}
		for _, to := range imports[p.dir] {
			if !seen[to] && (callers[to] || isRoom(to) && to != p.dir) {
				seen[to] = true
				back = append(back, p.dir+" -> "+to)
			}
		}
	}
	sort.Strings(back)
	return rooms, back
}

func isRoom(dir string) bool { return strings.HasPrefix(dir, kernelDir+"/") }

func parseAll(fset *token.FileSet, root string) ([]pkg, error) {
	byDir := map[string]*pkg{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || base == "node_modules" || base == "testdata" || rel == "infra") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		file, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if byDir[dir] == nil {
			byDir[dir] = &pkg{dir: dir, files: map[string]*ast.File{}}
		}
		byDir[dir].files[filepath.Base(rel)] = file
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []pkg
	for _, p := range byDir {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dir < out[j].dir })
	return out, nil
}

// methodsOf raises f's largest type when p has a type with more methods.
func methodsOf(p pkg, f *Figures) {
	n := map[string]int{}
	for _, file := range p.files {
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && len(fn.Recv.List) == 1 {
				n[receiverName(fn.Recv.List[0].Type)]++
			}
		}
	}
	for name, c := range n {
		if c > f.LargestMethods {
			f.LargestType, f.LargestMethods = p.dir+"."+name, c
		}
	}
}

func receiverName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverName(t.X)
	case *ast.IndexExpr:
		return receiverName(t.X)
	case *ast.IndexListExpr:
		return receiverName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// tangle counts p's file-to-file arrows and those on a cycle. A file
// refers to another when it names a top-level function, type, variable
// or constant that file declares, or selects a method or field name only
// that file's types declare.
func tangle(p pkg) (arrows, back int) {
	declared := map[string]map[string]bool{} // name -> files declaring it
	note := func(name, file string) {
		if declared[name] == nil {
			declared[name] = map[string]bool{}
		}
		declared[name][file] = true
	}
	for name, file := range p.files {
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				note(d.Name.Name, name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						note(s.Name.Name, name)
					case *ast.ValueSpec:
						for _, id := range s.Names {
							note(id.Name, name)
						}
					}
				}
			}
		}
	}
	edges := map[string]map[string]bool{}
	for name, file := range p.files {
		edges[name] = map[string]bool{}
		ast.Inspect(file, func(n ast.Node) bool {
			var id string
			switch n := n.(type) {
			case *ast.Ident:
				id = n.Name
			case *ast.SelectorExpr:
				id = n.Sel.Name
			default:
				return true
			}
			if files := declared[id]; len(files) == 1 {
				for to := range files {
					if to != name {
						edges[name][to] = true
					}
				}
			}
			return true
		})
	}
	scc := components(edges)
	for from, tos := range edges {
		for to := range tos {
			arrows++
			if scc[from] == scc[to] {
				back++
			}
		}
	}
	return arrows, back
}

// components labels each node with its strongly connected component.
func components(edges map[string]map[string]bool) map[string]int {
	index, low, comp := map[string]int{}, map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	next, label := 0, 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range sortedKeys(edges[v]) {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = label
				if w == v {
					break
				}
			}
			label++
		}
	}
	for _, v := range sortedKeys(edges) {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return comp
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mutableVars lists p's package-level variables that hold state: one
// that the package assigns, increments, deletes from or clears after its
// declaration, takes the address of, or locks, stores into or adds to, and
// every sync or sync/atomic value. Sentinel errors (Err*, err*), tables
// only ever read and packages of test helpers (a directory ending in
// "test") are left out.
func mutableVars(p pkg) []string {
	if strings.HasSuffix(p.dir, "test") {
		return nil
	}
	declared := map[string]bool{}
	var order []string
	for _, name := range sortedKeys(p.files) {
		for _, d := range p.files[name].Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for _, id := range vs.Names {
					if id.Name == "_" || strings.HasPrefix(id.Name, "Err") || strings.HasPrefix(id.Name, "err") {
						continue
					}
					if !declared[id.Name] {
						order = append(order, id.Name)
					}
					declared[id.Name] = declared[id.Name] || syncType(vs.Type)
				}
			}
		}
	}
	mutated := map[string]bool{}
	for _, file := range p.files {
		for name := range mutations(file) {
			if _, ok := declared[name]; ok {
				mutated[name] = true
			}
		}
	}
	var out []string
	for _, name := range order {
		if declared[name] || mutated[name] {
			out = append(out, p.dir+"."+name)
		}
	}
	return out
}

// syncType reports whether t is a type of sync or sync/atomic.
func syncType(t ast.Expr) bool {
	sel, ok := t.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && (x.Name == "sync" || x.Name == "atomic")
}

// mutatingMethods are the method names that change the value they are
// called on.
var mutatingMethods = map[string]bool{
	"Lock": true, "Unlock": true, "RLock": true, "RUnlock": true, "Store": true, "Add": true,
	"Swap": true, "CompareAndSwap": true, "LoadOrStore": true, "LoadAndDelete": true, "Delete": true, "Set": true,
}

// mutations are the names file changes outside init functions: assigned
// (whole or in part), incremented, deleted from, cleared, addressed or
// mutated by a method.
func mutations(file *ast.File) map[string]bool {
	out := map[string]bool{}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			// An init function builds a table once, before any caller.
			return n.Recv != nil || n.Name.Name != "init"
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				return true
			}
			for _, l := range n.Lhs {
				out[root(l)] = true
			}
		case *ast.IncDecStmt:
			out[root(n.X)] = true
		case *ast.UnaryExpr:
			if n.Op == token.AND {
				out[root(n.X)] = true
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "delete" || id.Name == "clear") && len(n.Args) > 0 {
				out[root(n.Args[0])] = true
			}
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && mutatingMethods[sel.Sel.Name] {
				out[root(sel.X)] = true
			}
		}
		return true
	})
	return out
}

// root is the variable an expression such as x.f[i] starts from.
func root(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.Ident:
			return t.Name
		case *ast.SelectorExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.StarExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		default:
			return ""
		}
	}
}

// updateLoops lists the read-decide-write loops, by file and function: a
// loop bounded by a count of rounds or tries (its header names one, or a
// round or try variable whose bound the body checks) whose
// body writes (a call named Write*, Transition*, Update*, Put*, Create*,
// Delete*, Mark*, Apply*, Release*, Close*, store* or write*) and decides again on
// what it reads (Get*, Read*, Find*, List*, Query*, read*, state) or on
// what a refused write found (it names ErrVersionConflict). A loop that
// resubmits one write unchanged is not one. The generic loop
// (ledger.Update, bounded by its rounds, calling its read and write) is
// one; a caller that passes it closures has no loop of its own.
func updateLoops(fset *token.FileSet, p pkg) []string {
	var out []string
	for _, name := range sortedKeys(p.files) {
		for _, d := range p.files[name].Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || testCase(fn) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				var header []ast.Node
				var body *ast.BlockStmt
				switch l := n.(type) {
				case *ast.ForStmt:
					header, body = []ast.Node{l.Init, l.Cond, l.Post}, l.Body
				case *ast.RangeStmt:
					header, body = []ast.Node{l.Key, l.X}, l.Body
				default:
					return true
				}
				decides := callsNamed(body, readPrefixes) || names(body, "ErrVersionConflict")
				if !bounded(header) || !decides || !callsNamed(body, writePrefixes) {
					return true
				}
				out = append(out, fmt.Sprintf("%s/%s:%s", p.dir, name, fn.Name.Name))
				return false // a loop inside is the same loop's rounds
			})
		}
	}
	return out
}

var (
	readPrefixes  = []string{"Get", "Read", "Find", "List", "Query", "state", "read"}
	writePrefixes = []string{"Write", "Transition", "Update", "Put", "Create", "Delete", "Mark", "Apply", "Release", "Close", "store", "write"}
)

// testCase reports whether fn is a test's code (it takes a *testing.T or
// a testing.TB): a contract suite's case that races writers on purpose is
// no loop of the product's.
func testCase(fn *ast.FuncDecl) bool {
	for _, f := range fn.Type.Params.List {
		t := f.Type
		if st, ok := t.(*ast.StarExpr); ok {
			t = st.X
		}
		if sel, ok := t.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testing" {
				return true
			}
		}
	}
	return false
}

// roundNames are the loop variables that count rounds or tries: a loop
// over one is bounded even when its bound is checked in the body.
var roundNames = []string{"round", "try", "attempt"}

// bounded reports whether a loop header names a count of rounds or tries,
// or a variable that counts them.
func bounded(header []ast.Node) bool {
	for _, h := range header {
		if h == nil || h == ast.Node(nil) {
			continue
		}
		found := false
		ast.Inspect(h, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				low := strings.ToLower(id.Name)
				found = found || slices.Contains(roundNames, low) || strings.HasSuffix(low, "retries") || strings.HasSuffix(low, "rounds") || strings.HasSuffix(low, "tries")
			}
			return !found
		})
		if found {
			return true
		}
	}
	return false
}

// callsNamed reports whether n calls a function or method whose name
// starts with one of prefixes, in either case (getX reads as GetX does).
func callsNamed(n ast.Node, prefixes []string) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		name := ""
		switch f := call.Fun.(type) {
		case *ast.Ident:
			name = f.Name
		case *ast.SelectorExpr:
			name = f.Sel.Name
		}
		for _, p := range prefixes {
			found = found || strings.HasPrefix(strings.ToLower(name), strings.ToLower(p))
		}
		return !found
	})
	return found
}

// calls lists the calls of pkgName.fn in p, by position.
func calls(fset *token.FileSet, p pkg, pkgName, fn string) []string {
	var out []string
	for _, name := range sortedKeys(p.files) {
		ast.Inspect(p.files[name], func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == fn {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == pkgName {
					pos := fset.Position(call.Pos())
					out = append(out, fmt.Sprintf("%s:%d", pos.Filename, pos.Line))
				}
			}
			return true
		})
	}
	return out
}

// names reports whether n names ident.
func names(n ast.Node, ident string) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == ident {
			found = true
		}
		return !found
	})
	return found
}
