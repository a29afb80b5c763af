#!/usr/bin/env bash
# Runs one stage of `make`, then prints how long it took: stage.sh NAME COMMAND...
name=$1; shift
start=$(date +%s%N)
"$@"
status=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '== stage %-12s %4d.%01ds%s\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) \
  "$([ $status -eq 0 ] || echo "  FAILED (exit $status)")"
exit $status
