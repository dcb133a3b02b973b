#!/usr/bin/env python3
"""Functions of more than 80 lines (LIMIT) and files of more than 600 (FILE_LIMIT) in the crates'
sources, outside tests and the bench: a long function is the steps it performs, each a named
function, and a long file the parts it holds, each a module (STYLE.md). Counts a function from
its `fn` line to its closing brace, a file whole; a `#[cfg(test)] mod` at a file's end (for
functions) and `tests.rs` files and `tests/` folders are left out. Exits 1 and lists them when
there is one.

Usage: .ci/long-functions.py crates/a [crates/b ...]
"""
import re,sys,os
LIMIT=int(os.environ.get("LIMIT","80"))
FILE_LIMIT=int(os.environ.get("FILE_LIMIT","600"))
def scan(path):
    src=open(path).read().split("\n")
    out=[]
    in_test_from=None
    i=0
    n=len(src)
    # find #[cfg(test)] mod start line -> skip rest of file after it (tests modules at end by convention)
    for idx,l in enumerate(src):
        if l.strip()=="#[cfg(test)]" and idx+1<n and re.match(r"\s*mod \w+", src[idx+1]):
            in_test_from=idx;break
    end = in_test_from if in_test_from is not None else n
    fnre=re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")
    idx=0
    while idx<end:
        m=fnre.match(src[idx])
        if m:
            # find opening brace
            depth=0;started=False;j=idx
            while j<n:
                line=re.sub(r'"([^"\\]|\\.)*"','""',src[j])
                line=re.sub(r"//.*","",line)
                line=re.sub(r"'([^'\\]|\\.)'","''",line)
                for ch in line:
                    if ch=='{': depth+=1;started=True
                    elif ch=='}': depth-=1
                if started and depth==0: break
                if not started and line.rstrip().endswith(';'): break
                j+=1
            length=j-idx+1
            if started and length>LIMIT: out.append((length,path,idx+1,m.group(6)))
            idx=j+1 if started else idx+1
        else: idx+=1
    return out
res=[]
long_files=[]
for root in sys.argv[1:]:
    for dp,dn,fn in os.walk(root):
        if "/tests" in dp or "target" in dp: continue
        for f in fn:
            if f.endswith(".rs") and f!="tests.rs":
                path=os.path.join(dp,f)
                res+=scan(path)
                lines=open(path).read().count("\n")
                if lines>FILE_LIMIT: long_files.append((lines,path))
for r in sorted(res,reverse=True): print(f"{r[1]}:{r[2]}: fn {r[3]} is {r[0]} lines (at most {LIMIT})")
for lines,path in sorted(long_files,reverse=True): print(f"{path}: {lines} lines (at most {FILE_LIMIT})")
if res or long_files:
    sys.exit(1)
print(f"no function over {LIMIT} lines, no file over {FILE_LIMIT}")
