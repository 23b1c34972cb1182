// the inbox page
