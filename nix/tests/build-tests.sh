: # build tests come here
