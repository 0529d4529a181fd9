"""Agent Skills: local skill folders (``SKILL.md``) and the API's skills.

- `local`: a local skill folder, read and checked;
- `middleware`: the default middleware that puts skills in the system prompt or the request.
"""
