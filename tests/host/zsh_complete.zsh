# What zsh offers for a command line, TAB pressed at its end, in a real
# interactive zsh (a pseudo-terminal through zsh/zpty) with compinit and
# the completion functions of FPATH_DIR.  Every word the completion adds
# is appended to OUTFILE, then a line "--END--".
#
#     zsh -f zsh_complete.zsh FPATH_DIR OUTFILE "ibtool dev"
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "bindkey -e; fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D"
# record what reaches compadd (not the calls that only ask: -O, -A, -D)
zpty -w z 'compadd() { local -a m; if (( ! ${@[(I)-[OAD]]} )); then builtin compadd -O m "$@"; print -rl -- ${^m} >> '"$2"'; fi; builtin compadd "$@"; }'
zpty -w -n z "$3"$'\t'
# let the completion finish (it has offered something, or 5 s), then
# drop the line with Ctrl-C (keys typed while completion runs may be
# taken as typeahead)
for i in {1..50}; do
    [[ -s $2 ]] && break
    sleep 0.1
done
sleep 0.5
zpty -w -n z $'\C-c'
sleep 0.5               # the terminal flushes what is typed with Ctrl-C
zpty -w z "print -- --END-- >> $2"
for i in {1..200}; do
    grep -q -- --END-- $2 2>/dev/null && break
    sleep 0.1
done
# what the terminal showed, for the caller's error message
while zpty -r -t z line; do print -rn -- "$line" >&2; done
zpty -d z
