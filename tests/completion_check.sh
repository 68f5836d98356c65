#!/usr/bin/env bash
# completion_check.sh COMPLETION TRACEMILL — every option a command's --help
# lists (at the start of a help line, or [--opt] in its usage) is offered by
# the bash completion for that command, every option offered to a command that
# reads profiles is one it takes, and sample-v1 is offered as a format; prints
# what is missing or wrong and exits 1 if anything is.
# shellcheck disable=SC1090
source "$1"
cli="$2"
missing=0
for c in convert diff info query export-sqlite symbolize record serve store; do
  COMP_WORDS=(tracemill "$c" --); COMP_CWORD=2; _tracemill; comp=" ${COMPREPLY[*]} "
  for o in $("$cli" "$c" --help | grep -oE '^ {2,8}(-[a-zA-Z], )?--[a-z0-9-]+|\[--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+'); do
    [[ $comp == *" $o "* ]] || { echo "tracemill $c: $o is not completed"; missing=1; }
  done
done
# The other way: every option offered to a command that reads profiles is one it
# takes (a value-taking option may refuse the probe as its value, never as unknown).
for c in convert diff info query export-sqlite symbolize; do
  COMP_WORDS=(tracemill "$c" --); COMP_CWORD=2; _tracemill
  for o in "${COMPREPLY[@]}"; do
    [[ $o == --help ]] && continue
    "$cli" "$c" "$o" --completion-check-probe </dev/null 2>&1 | grep -qF -- "unknown option $o" &&
      { echo "tracemill $c: $o is completed but refused as unknown"; missing=1; }
  done
done
for w in -f --input-format; do
  COMP_WORDS=(tracemill convert "$w" ''); COMP_CWORD=3; _tracemill
  [[ " ${COMPREPLY[*]} " == *" sample-v1 "* ]] || { echo "tracemill convert $w: sample-v1 is not completed"; missing=1; }
done
exit "$missing"
