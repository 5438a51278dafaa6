#!/bin/bash
for m in "$@"; do
  s=$(date +%s)
  timeout 400 python run1.py $m > log_$m.txt 2>&1
  echo "$m rc=$? $(( $(date +%s)-s ))s" >> progress.txt
  grep '^RESULT' log_$m.txt | sed 's/^RESULT //' >> results.jsonl
done
