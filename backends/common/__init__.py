"""What more than one backend uses: the job's own names for the values of a module (names.py,
from hints, blob names and the job's source lines: source.py; where values live and which are
shown: liveness.py). The text plan writes with them; numba names its generated code's variables
with them. A backend imports these from here, never from another backend's folder."""
