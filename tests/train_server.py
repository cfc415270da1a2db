"""A process that imports alf_lite's dependencies once and forks a child per command.

``python -m alf_lite.bin.<tool> ...`` spends about two seconds importing torch,
gymnasium and gin before it reads its first flag; the tests start it a few hundred
times. This server imports them once. For each request it forks a child that
becomes what ``python -m`` would have run: the working directory, environment,
arguments and ``sys.path[0]`` of the request, standard input from ``/dev/null``,
standard output and error into the request's files, the module run as
``__main__`` by ``runpy`` (the tool's flags are defined in the child only), and
the interpreter's normal exit with its ``atexit`` handlers. The child is a real
process with its own exit status, signals and files; what it shares with the
other children is what the imports left in memory and the hash seed of ``str``,
so a test comparing the numbers of two runs starts them as fresh interpreters
(``cli_helpers.run_train(..., fresh_interpreter=True)``).

Protocol, one JSON object a line on standard input, answered on the file
descriptor given as the one argument (standard output stays what the imports
print to): ``{"module", "args", "cwd", "env", "stdout", "stderr"}`` (``"code"``
instead of ``"module"`` for ``python -c <code> <args>``, and ``"new_session": true``
for a child in a session of its own) is answered
by ``pid <N>`` once the child runs and ``exit <status>`` when it ended
(``os.waitstatus_to_exitcode``: minus the signal number when a signal ended it).
"""

import json
import os
import runpy
import sys
import types


def serve(answers):
    """Answer requests until standard input closes; in a child, return its request."""
    for line in sys.stdin:
        request = json.loads(line)
        # Closed by the child once it is in a session of its own: its pid is answered then.
        in_session, in_session_written = os.pipe()
        pid = os.fork()
        if pid == 0:
            answers.close()
            if request.get('new_session'):
                os.setsid()
            os.close(in_session)
            os.close(in_session_written)
            return request
        os.close(in_session_written)
        os.read(in_session, 1)
        os.close(in_session)
        answers.write(f'pid {pid}\n')
        _, status = os.waitpid(pid, 0)
        answers.write(f'exit {os.waitstatus_to_exitcode(status)}\n')
    sys.exit(0)


def become(request):
    """Turn this forked child into ``python -m <module> <args>`` as the request says."""
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    fds = [
        os.open(os.devnull, os.O_RDONLY),
        os.open(request['stdout'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        os.open(request['stderr'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    if 'code' in request:
        # ``python -c`` puts '' (the working directory) first on the path, then PYTHONPATH.
        sys.path[0] = ''
        extra = [p for p in request['env'].get('PYTHONPATH', '').split(os.pathsep) if p]
        sys.path[1:1] = [p for p in extra if p not in sys.path]
        sys.argv = ['-c', *request['args']]
    else:
        # ``python -m`` puts the working directory first on the path.
        sys.path[0] = os.getcwd()
        sys.argv = ['-m', *request['args']]


def main():
    import torch._dynamo  # noqa: F401  (imported by the first torch.optim.Adam)

    import alf_lite.all_configurables  # noqa: F401  (torch, gymnasium, gin and alf_lite)

    # Line-buffered: each answer is written as soon as it is known.
    with open(int(sys.argv[1]), 'w', buffering=1) as answers:
        request = serve(answers)
    become(request)
    if 'code' in request:
        main_module = types.ModuleType('__main__')
        sys.modules['__main__'] = main_module
        exec(compile(request['code'], '<string>', 'exec'), main_module.__dict__)
    else:
        runpy.run_module(request['module'], run_name='__main__', alter_sys=True)


if __name__ == '__main__':
    main()
